"""The test OpenID provider (tests/support/oidc_provider.py) is a real one that the console's single
sign-on can be tested against: discovery, the authorization code flow with PKCE, ID tokens signed
with a key from its JWKS carrying the nonce, email and groups, and users that tests can refuse,
demote, sign out and remove."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet

from tests.support.oidc_provider import (
    ADMIN,
    USER,
    Browser,
    OidcProvider,
    forms,
    oidc_provider,
    running_provider,
)

__all__ = ["oidc_provider"]

SCOPE = "openid email profile groups"


@dataclass
class Authorization:
    """One authorization request's secrets, as a client keeps them until the callback."""

    url: str
    state: str
    nonce: str
    verifier: str


def authorization(provider: OidcProvider, discovery: dict[str, Any]) -> Authorization:
    """A code flow request with PKCE (S256), state and nonce."""
    state, nonce, verifier = (secrets.token_urlsafe(32) for _ in range(3))
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    query = urlencode({
        "response_type": "code", "client_id": provider.client_id, "scope": SCOPE,
        "redirect_uri": provider.redirect_uris[0], "state": state, "nonce": nonce,
        "code_challenge": challenge.decode(), "code_challenge_method": "S256",
    })
    return Authorization(f"{discovery['authorization_endpoint']}?{query}", state, nonce, verifier)


def callback_params(response: httpx2.Response, provider: OidcProvider) -> dict[str, str]:
    """The query of the redirect to the client's redirect URI."""
    assert response.status_code in (302, 303), f"{response.status_code}: {response.text[:500]}"
    location = response.headers["location"]
    assert location.startswith(provider.redirect_uris[0] + "?"), location
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def exchange(provider: OidcProvider, discovery: dict[str, Any], code: str, verifier: str) -> httpx2.Response:
    """The token request, with the client's secret the way its registered method says."""
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": provider.redirect_uris[0],
            "code_verifier": verifier}
    auth: tuple[str, str] | None = (provider.client_id, provider.client_secret)
    if provider.token_endpoint_auth_method == "client_secret_post":
        data |= {"client_id": provider.client_id, "client_secret": provider.client_secret}
        auth = None
    return httpx2.post(discovery["token_endpoint"], data=data, auth=auth, trust_env=False, timeout=10)


def sign_in(provider: OidcProvider, browser: Browser, login: str, password: str) -> dict[str, Any]:
    """The whole flow as a client does it; the ID token's claims, its signature checked."""
    discovery = httpx2.get(provider.discovery_url, trust_env=False).json()
    request = authorization(provider, discovery)
    params = callback_params(browser.sign_in(request.url, login, password), provider)
    assert params["state"] == request.state
    assert params["iss"] == provider.issuer
    tokens = exchange(provider, discovery, params["code"], request.verifier)
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    assert body["token_type"].lower() == "bearer"
    keys = KeySet.import_key_set(httpx2.get(discovery["jwks_uri"], trust_env=False).json())
    # decode() checks the signature against the provider's keys, RS256 only.
    token = jwt.decode(body["id_token"], keys, algorithms=["RS256"])
    jwt.JWTClaimsRegistry(
        iss={"essential": True, "value": provider.issuer},
        aud={"essential": True, "value": provider.client_id},
        nonce={"essential": True, "value": request.nonce},
    ).validate(token.claims)
    return token.claims


@pytest.fixture
def browser(oidc_provider: OidcProvider) -> Iterator[Browser]:
    """A user agent with no cookies yet, on the `oidc_provider` of the test."""
    with Browser(oidc_provider) as b:
        yield b


def test_discovery_names_the_code_flow_with_pkce(oidc_provider: OidcProvider) -> None:
    doc = httpx2.get(oidc_provider.discovery_url, trust_env=False).json()
    issuer = oidc_provider.issuer
    assert issuer.startswith("http://127.0.0.1:")
    assert doc["issuer"] == issuer
    assert doc["authorization_endpoint"].startswith(issuer + "/")
    assert doc["token_endpoint"].startswith(issuer + "/")
    assert doc["jwks_uri"].startswith(issuer + "/")
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert "code" in doc["response_types_supported"]
    assert {"client_secret_basic", "client_secret_post"} <= set(doc["token_endpoint_auth_methods_supported"])
    assert {"openid", "email", "profile", "groups"} <= set(doc["scopes_supported"])
    assert "RS256" in doc["id_token_signing_alg_values_supported"]
    keys = httpx2.get(doc["jwks_uri"], trust_env=False).json()["keys"]
    assert [(k["kty"], k["alg"], k["use"]) for k in keys] == [("RSA", "RS256", "sig")]
    assert "d" not in keys[0], "the JWKS must hold only the public key"


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_code_flow_with_pkce_yields_a_signed_id_token_with_email_and_groups(
        tmp_path: Path, method: str) -> None:
    with (running_provider(tmp_path, token_endpoint_auth_method=method, id_token_ttl_s=120) as provider,
          Browser(provider) as browser):
        claims = sign_in(provider, browser, ADMIN.email, ADMIN.password)
    assert claims["sub"] == ADMIN.sub
    assert claims["email"] == ADMIN.email
    assert claims["email_verified"] is True
    assert claims["name"] == ADMIN.name
    assert claims["groups"] == list(ADMIN.groups)
    assert claims["exp"] - claims["iat"] == 120  # the TTL from the config
    assert abs(claims["iat"] - time.time()) < 30


def test_a_wrong_password_is_refused(oidc_provider: OidcProvider, browser: Browser) -> None:
    discovery = httpx2.get(oidc_provider.discovery_url, trust_env=False).json()
    login = browser.open(authorization(oidc_provider, discovery).url)
    assert login.status_code == 200
    assert {"login", "password"} <= set(forms(login.text)[0].fields)
    refused = browser.press(login, "sign-in", login=USER.sub, password="not-" + USER.password)
    assert refused.status_code == 401
    assert 'name="password"' in refused.text and "Wrong login or password" in refused.text
    # The same interaction still takes the right password.
    accepted = browser.press(refused, "sign-in", login=USER.sub, password=USER.password)
    assert accepted.status_code == 200 and 'id="consent"' in accepted.text


def test_pkce_is_required_and_checked(oidc_provider: OidcProvider, browser: Browser) -> None:
    discovery = httpx2.get(oidc_provider.discovery_url, trust_env=False).json()
    request = authorization(oidc_provider, discovery)
    without = "&".join(p for p in request.url.split("&") if not p.startswith("code_challenge"))
    params = callback_params(browser.open(without), oidc_provider)
    assert params["error"] == "invalid_request"
    assert "PKCE" in params["error_description"]

    # A code is only exchanged with the verifier of its challenge.
    params = callback_params(browser.sign_in(request.url, USER.sub, USER.password), oidc_provider)
    refused = exchange(oidc_provider, discovery, params["code"], secrets.token_urlsafe(32))
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_grant"


def test_demoted_then_signed_out_then_removed(oidc_provider: OidcProvider, browser: Browser) -> None:
    assert sign_in(oidc_provider, browser, ADMIN.sub, ADMIN.password)["groups"] == ["llmgw-admins"]

    # Demoted: the provider's session still holds, and the next ID token says the new groups.
    oidc_provider.set_groups(ADMIN.sub, ["llmgw-users"])
    discovery = httpx2.get(oidc_provider.discovery_url, trust_env=False).json()
    silent = browser.open(authorization(oidc_provider, discovery).url)
    assert "code" in callback_params(silent, oidc_provider), "a live session signs in without a form"
    assert sign_in(oidc_provider, browser, ADMIN.sub, ADMIN.password)["groups"] == ["llmgw-users"]

    # Signed out at the provider: the login form comes back.
    assert oidc_provider.end_sessions(ADMIN.sub) == 1
    page = browser.open(authorization(oidc_provider, discovery).url)
    assert page.status_code == 200 and 'name="password"' in page.text

    # Removed: the right password no longer signs in.
    oidc_provider.remove_account(ADMIN.sub)
    refused = browser.press(page, "sign-in", login=ADMIN.sub, password=ADMIN.password)
    assert refused.status_code == 401
    # The other user is untouched.
    assert sign_in(oidc_provider, browser, USER.sub, USER.password)["groups"] == ["llmgw-users"]


def test_signing_out_at_the_provider_ends_its_session(tmp_path: Path) -> None:
    bye = "http://127.0.0.1:9/console/signed-out"
    with (running_provider(tmp_path, session_ttl_s=300, post_logout_redirect_uris=[bye]) as provider,
          Browser(provider) as browser):
        sign_in(provider, browser, USER.sub, USER.password)
        # The session lasts as long as the config says.
        session = next(c for c in browser.http.cookies.jar if c.name == "_session")
        assert session.expires is not None and abs(session.expires - time.time() - 300) < 30

        discovery = httpx2.get(provider.discovery_url, trust_env=False).json()
        query = urlencode({"client_id": provider.client_id, "post_logout_redirect_uri": bye})
        page = browser.open(f"{discovery['end_session_endpoint']}?{query}")
        assert page.status_code == 200
        signed_out = browser.press(page, "sign-out")
        assert signed_out.status_code in (302, 303) and signed_out.headers["location"] == bye
        again = browser.open(authorization(provider, discovery).url)
        assert again.status_code == 200 and 'name="password"' in again.text


def test_the_admin_api_wants_its_token(oidc_provider: OidcProvider) -> None:
    response = httpx2.delete(f"{oidc_provider.issuer}/__test/accounts/{ADMIN.sub}", trust_env=False,
                             headers={"Authorization": "Bearer wrong"})
    assert response.status_code == 401
    assert ADMIN.sub in {a["sub"] for a in oidc_provider.provider_accounts()}
