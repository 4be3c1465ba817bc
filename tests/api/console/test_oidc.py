"""The console as an OpenID relying party, against a real provider (`oidc-provider` under node):
the code flow with PKCE signs a user in, and every forged or replayed part of it is refused."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from llmgw.api.console.oidc import Flow, Identity, OidcClient, safe_return_to
from llmgw.core.errors import IdentityProviderUnavailable, SignInRefused
from tests.support.oidc_provider import (
    ADMIN,
    DEFAULT_REDIRECT_URI,
    Browser,
    OidcProvider,
    oidc_provider,
    running_provider,
)

__all__ = ["oidc_provider"]  # the fixture


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def client(provider: OidcProvider, http: aiohttp.ClientSession, **kw: Any) -> OidcClient:
    return OidcClient(http, provider.issuer, provider.client_id, provider.client_secret,
                      DEFAULT_REDIRECT_URI, ("openid", "email", "profile", "groups"), **kw)


async def back_from_provider(provider: OidcProvider, url: str, login: str = ADMIN.sub,
                             password: str = ADMIN.password) -> dict[str, str]:
    """What the browser brings back to the console's callback after signing in at `url`."""

    def sign_in() -> str:
        with Browser(provider) as browser:
            page = browser.sign_in(url, login, password)
            assert page.is_redirect, f"the provider did not send the browser back: {page.text[:500]}"
            return str(page.headers["location"])

    location = await asyncio.to_thread(sign_in)
    assert location.startswith(DEFAULT_REDIRECT_URI)
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


async def signed_in(oidc: OidcClient, provider: OidcProvider) -> tuple[Flow, dict[str, str], Identity]:
    url, flow = await oidc.begin("/ui/keys")
    back = await back_from_provider(provider, url)
    return flow, back, await oidc.finish(flow, back.get("state"), back.get("code"))


def forged(claims: dict[str, Any], key: RSAKey, alg: str = "RS256") -> str:
    return jwt.encode({"alg": alg, "kid": key.kid}, claims, key)


async def test_a_user_signs_in_through_the_provider_and_comes_back_with_their_groups(
        oidc_provider: OidcProvider, http: aiohttp.ClientSession) -> None:
    oidc = client(oidc_provider, http)
    url, flow = await oidc.begin("/ui/keys")
    query = parse_qs(urlsplit(url).query)
    assert query["code_challenge_method"] == ["S256"] and query["state"] == [flow.state]
    assert flow.verifier not in url  # only its hash travels through the browser
    back = await back_from_provider(oidc_provider, url)
    who = await oidc.finish(flow, back["state"], back["code"])
    assert (who.subject, who.email, who.groups) == (ADMIN.sub, ADMIN.email, ADMIN.groups)
    assert who.email_verified and who.name == ADMIN.name
    assert flow.return_to == "/ui/keys"


@pytest.mark.parametrize("verified", [False, None])  # said false, or not said at all
async def test_an_email_the_provider_did_not_verify_comes_back_unverified(
        oidc_provider: OidcProvider, http: aiohttp.ClientSession, verified: bool | None) -> None:
    oidc_provider.set_account(replace(ADMIN, email_verified=verified))
    _, _, who = await signed_in(client(oidc_provider, http), oidc_provider)
    assert (who.email, who.email_verified) == (ADMIN.email, False)


async def test_an_answer_with_another_state_is_refused(
        oidc_provider: OidcProvider, http: aiohttp.ClientSession) -> None:
    oidc = client(oidc_provider, http)
    url, flow = await oidc.begin()
    back = await back_from_provider(oidc_provider, url)
    # An attacker's code and state, pushed into a victim's browser that started its own flow.
    _, mine = await oidc.begin()
    with pytest.raises(SignInRefused):
        await oidc.finish(mine, back["state"], back["code"])
    with pytest.raises(SignInRefused):
        await oidc.finish(None, back["state"], back["code"])
    with pytest.raises(SignInRefused):
        await oidc.finish(flow, None, back["code"])


async def test_a_replayed_code_is_refused(oidc_provider: OidcProvider, http: aiohttp.ClientSession) -> None:
    oidc = client(oidc_provider, http)
    flow, back, _ = await signed_in(oidc, oidc_provider)
    with pytest.raises(SignInRefused):
        await oidc.finish(flow, back["state"], back["code"])


async def test_a_code_without_its_pkce_verifier_is_refused(
        oidc_provider: OidcProvider, http: aiohttp.ClientSession) -> None:
    oidc = client(oidc_provider, http)
    url, flow = await oidc.begin()
    back = await back_from_provider(oidc_provider, url)
    with pytest.raises(SignInRefused):  # a stolen code, without the browser's verifier
        await oidc.finish(replace(flow, verifier="x" * 64), back["state"], back["code"])


async def test_the_providers_error_is_refused_without_echoing_its_description(
        oidc_provider: OidcProvider, http: aiohttp.ClientSession) -> None:
    oidc = client(oidc_provider, http)
    _, flow = await oidc.begin()
    with pytest.raises(SignInRefused) as caught:
        await oidc.finish(flow, flow.state, None, error="access_denied")
    assert "access_denied" in caught.value.message
    with pytest.raises(SignInRefused) as caught:
        await oidc.finish(flow, flow.state, None, error="<script>alert(1)</script>")
    assert "script" not in caught.value.message


async def test_forged_id_tokens_are_refused(oidc_provider: OidcProvider, http: aiohttp.ClientSession) -> None:
    oidc = client(oidc_provider, http)
    _, _, real = await signed_in(oidc, oidc_provider)
    header, claims = (json.loads(base64.urlsafe_b64decode(part + "==")) for part in
                      real.id_token.split(".")[:2])
    nonce = claims["nonce"]
    assert (await oidc.verify(real.id_token, nonce)).subject == ADMIN.sub
    # The provider's key id on a key of the attacker's own.
    attacker = RSAKey.generate_key(2048, parameters={"kid": header["kid"]})
    now = int(time.time())
    good = {**claims, "iat": now, "exp": now + 300}
    cases = {
        "signed by another key": forged(good, attacker),
        "for another client": forged({**good, "aud": "someone-else"}, attacker),
        "expired": forged({**good, "exp": now - 3600}, attacker),
        "unsigned (alg none)": ".".join([
            base64.urlsafe_b64encode(json.dumps({"alg": "none", "kid": header["kid"]}).encode())
            .rstrip(b"=").decode(),
            base64.urlsafe_b64encode(json.dumps(good).encode()).rstrip(b"=").decode(), ""]),
        "not a JWT": "hello",
    }
    for what, token in cases.items():
        with pytest.raises(SignInRefused):
            await oidc.verify(token, nonce)
            pytest.fail(f"an ID token {what} was accepted")
    # The provider's own token, but for another sign-in (its nonce) or with the nonce missing.
    with pytest.raises(SignInRefused):
        await oidc.verify(real.id_token, "another-nonce")
    with pytest.raises(SignInRefused):
        await oidc.verify(real.id_token, "")


async def test_an_expired_id_token_from_the_provider_is_refused(
        oidc_provider: OidcProvider, http: aiohttp.ClientSession) -> None:
    oidc = client(oidc_provider, http)
    _, _, real = await signed_in(oidc, oidc_provider)
    later = client(oidc_provider, http, now=lambda: real.expires_at + 120)
    with pytest.raises(SignInRefused):
        await later.verify(real.id_token, "")


async def test_a_provider_that_names_another_issuer_is_not_trusted(
        oidc_provider: OidcProvider, http: aiohttp.ClientSession) -> None:
    # The same provider reached under another name: its document names the real issuer.
    other = OidcClient(http, oidc_provider.issuer.replace("127.0.0.1", "localhost"),
                       oidc_provider.client_id, oidc_provider.client_secret, DEFAULT_REDIRECT_URI)
    with pytest.raises(IdentityProviderUnavailable):
        await other.begin()


async def test_a_provider_that_is_down_is_unavailable_not_a_crash(
        tmp_path: Path, http: aiohttp.ClientSession) -> None:
    with running_provider(tmp_path / "oidc") as provider:
        issuer = provider.issuer
    gone = OidcClient(http, issuer, "llmgw-console", "secret", DEFAULT_REDIRECT_URI)
    with pytest.raises(IdentityProviderUnavailable):
        await gone.begin()


@pytest.mark.parametrize(("target", "expected"), [
    ("/ui/keys?page=2", "/ui/keys?page=2"),
    ("https://evil.example/ui/", "/ui/"),
    ("//evil.example/ui/", "/ui/"),
    ("/ui//evil.example", "/ui/"),
    ("/ui/\\evil.example", "/ui/"),
    ("/admin/v1/keys", "/ui/"),
    ("/ui/\r\nSet-Cookie: x", "/ui/"),
    (None, "/ui/"),
])
def test_the_return_address_stays_within_the_console(target: str | None, expected: str) -> None:
    assert safe_return_to(target) == expected
