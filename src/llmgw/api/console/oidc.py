"""Single sign-on with an OpenID Connect provider: the authorization code flow with PKCE, as the
console's relying party.

`begin` makes the provider's sign-in URL and the `Flow` the browser keeps (signed, in its
pre-sign-in cookie) until it comes back; `finish` checks the state it brings back against that
flow, exchanges the code (with the PKCE verifier and the client's secret) and checks the ID
token: its signature against the provider's published keys (never `none`, never a shared-secret
algorithm, which an attacker who knows the client id could try to pass off), then its issuer,
audience, authorized party, expiry and the flow's nonce. Only then is there an `Identity`.

The provider's HTTP failures are mapped here, once: an unreachable or non-OIDC provider is
IdentityProviderUnavailable (try again later), anything about the attempt itself SignInRefused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus, urlencode, urlsplit

import aiohttp
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from pydantic import BaseModel, ConfigDict, ValidationError

from llmgw.admin.people import SignedIn
from llmgw.core.errors import IdentityProviderUnavailable, SignInRefused

logger = logging.getLogger(__name__)

# Asymmetric algorithms only: with HS256 the "key" would be the client secret, and a token's
# header would choose how it is checked.
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
              "EdDSA"]
# Clock skew allowed between this server and the provider when checking exp, iat and nbf.
LEEWAY_S = 60
# Keys are fetched again after this long, or at once for a key id not seen (a rotation), but
# not more than once a minute for unknown ids: a forged `kid` must not turn into a request flood.
KEYS_MAX_AGE_S = 3600
KEYS_REFETCH_GAP_S = 60
HTTP_TIMEOUT_S = 10
DEFAULT_SCOPES = ("openid", "email", "profile")


class Discovery(BaseModel):
    """The fields of the provider's `/.well-known/openid-configuration` the console uses."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    end_session_endpoint: str | None = None
    code_challenge_methods_supported: list[str] = []


@dataclass(frozen=True)
class Flow:
    """One sign-in under way, kept by the browser until the provider sends it back."""

    state: str
    nonce: str
    verifier: str
    return_to: str
    # A silent renewal of a signed-in session (`prompt=none`): the provider answers without a
    # page, and an error means the person may no longer sign in.
    silent: bool = False


@dataclass(frozen=True)
class Identity(SignedIn):
    """Who the provider says signed in, from a checked ID token."""

    expires_at: float
    id_token: str


def safe_return_to(target: str | None, default: str = "/ui/") -> str:
    """`target` when it is a path of the console, else `default`: after sign-in the browser goes
    back only within the console (no scheme, no host, no `//` or backslash tricks)."""
    if not target or not target.startswith("/ui/") or "\\" in target or "//" in target:
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or any(ord(c) < 0x21 for c in target):
        return default
    return target


def _challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class OidcClient:
    """The console as a relying party of one provider (`issuer`)."""

    def __init__(self, http: aiohttp.ClientSession | None, issuer: str, client_id: str,
                 client_secret: str, redirect_uri: str, scopes: tuple[str, ...] = DEFAULT_SCOPES,
                 now: Callable[[], float] = time.time, groups_claim: str = "groups") -> None:
        # None: made on first use, in the running loop, and closed by `close`.
        self._http = http
        self._own_http = http is None
        self.issuer = issuer.rstrip("/")
        self.client_id = client_id
        self._secret = client_secret
        self.redirect_uri = redirect_uri
        self.scopes = scopes if "openid" in scopes else ("openid", *scopes)
        self._now = now
        self._groups_claim = groups_claim
        self._discovery: Discovery | None = None
        self._keys: KeySet | None = None
        self._keys_at = 0.0

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        return self._http

    async def close(self) -> None:
        """Close the HTTP client this made for itself."""
        if self._own_http and self._http is not None:
            await self._http.close()
            self._http = None

    async def discovery(self) -> Discovery:
        """The provider's configuration, read once; its issuer must be the configured one."""
        if self._discovery is None:
            data = await self._get_json(f"{self.issuer}/.well-known/openid-configuration")
            try:
                found = Discovery.model_validate(data)
            except ValidationError as exc:
                raise IdentityProviderUnavailable(
                    "the identity provider's discovery document is not OpenID Connect's") from exc
            if found.issuer.rstrip("/") != self.issuer:
                # A document that names another issuer would have us trust its tokens.
                raise IdentityProviderUnavailable(
                    "the identity provider's discovery document names another issuer")
            self._discovery = found
        return self._discovery

    async def begin(self, return_to: str | None = None, *, silent: bool = False) -> tuple[str, Flow]:
        """The provider's sign-in URL and the flow the browser keeps until it returns; `silent`
        asks the provider to answer without showing a page (`prompt=none`)."""
        found = await self.discovery()
        flow = Flow(state=secrets.token_urlsafe(24), nonce=secrets.token_urlsafe(24),
                    verifier=secrets.token_urlsafe(48), return_to=safe_return_to(return_to),
                    silent=silent)
        params = {
            "response_type": "code", "client_id": self.client_id,
            "redirect_uri": self.redirect_uri, "scope": " ".join(self.scopes),
            "state": flow.state, "nonce": flow.nonce,
            "code_challenge": _challenge(flow.verifier), "code_challenge_method": "S256",
        }
        if silent:
            params["prompt"] = "none"
        query = urlencode(params)
        sep = "&" if "?" in found.authorization_endpoint else "?"
        return f"{found.authorization_endpoint}{sep}{query}", flow

    async def finish(self, flow: Flow | None, state: str | None, code: str | None,
                     error: str | None = None) -> Identity:
        """The identity of a browser back from the provider with `state` and `code` (or the
        provider's `error`), checked against the `flow` it started."""
        if flow is None:
            raise SignInRefused("no sign-in was started in this browser (or it took too long): "
                                "sign in again")
        if not state or not hmac.compare_digest(state, flow.state):
            raise SignInRefused("the identity provider's answer is not for the sign-in this "
                                "browser started")
        if error:
            # The provider's own error code only (a short token); its description may echo input.
            shown = error if error.replace("_", "").isalnum() and len(error) < 64 else "error"
            raise SignInRefused(f"the identity provider did not sign you in ({shown})")
        if not code:
            raise SignInRefused("the identity provider sent no code")
        tokens = await self._exchange(code, flow.verifier)
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise SignInRefused("the identity provider sent no ID token")
        return await self.verify(id_token, flow.nonce)

    async def verify(self, id_token: str, nonce: str) -> Identity:
        """The identity in `id_token` once its signature and claims hold (SignInRefused else)."""
        keys = await self._key_set()
        try:
            try:
                token = jwt.decode(id_token, keys, algorithms=ALGORITHMS)
            except InvalidKeyIdError:
                token = jwt.decode(id_token, await self._key_set(refresh=True), algorithms=ALGORITHMS)
            claims: dict[str, Any] = dict(token.claims)
            jwt.JWTClaimsRegistry(
                now=int(self._now()), leeway=LEEWAY_S,
                iss={"essential": True, "value": self.issuer},
                aud={"essential": True, "value": self.client_id},
                sub={"essential": True}, exp={"essential": True}, iat={"essential": True},
                nonce={"essential": True, "value": nonce},
            ).validate(claims)
        except JoseError as exc:
            # The reason (bad signature, expired, wrong audience...) is for the log, not the page.
            logger.warning("an ID token was refused: %s", exc.error)
            raise SignInRefused("the identity provider's ID token does not hold") from exc
        except ValueError as exc:  # not a JWT at all
            raise SignInRefused("the identity provider's ID token does not hold") from exc
        aud = claims["aud"]
        if isinstance(aud, list) and len(aud) > 1 and claims.get("azp") != self.client_id:
            raise SignInRefused("the identity provider's ID token was issued to another party")
        groups = claims.get(self._groups_claim) or []
        if isinstance(groups, str):
            groups = [groups]
        return Identity(
            issuer=self.issuer, subject=str(claims["sub"]),
            email=claims.get("email") if isinstance(claims.get("email"), str) else None,
            email_verified=claims.get("email_verified") is True,
            name=claims.get("name") if isinstance(claims.get("name"), str) else None,
            groups=tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else (),
            expires_at=float(claims["exp"]), id_token=id_token)

    async def _key_set(self, refresh: bool = False) -> KeySet:
        now = self._now()
        stale = self._keys is None or now - self._keys_at > KEYS_MAX_AGE_S
        if stale or (refresh and now - self._keys_at > KEYS_REFETCH_GAP_S):
            found = await self.discovery()
            data = await self._get_json(found.jwks_uri)
            try:
                self._keys = KeySet.import_key_set(data)
            except (JoseError, ValueError, TypeError, KeyError) as exc:
                raise IdentityProviderUnavailable(
                    "the identity provider's keys (JWKS) could not be read") from exc
            self._keys_at = now
        assert self._keys is not None
        return self._keys

    async def _get_json(self, url: str) -> Any:
        try:
            async with self._client().get(url, timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S),
                                      allow_redirects=False) as r:
                if r.status != 200:
                    raise IdentityProviderUnavailable(
                        f"the identity provider answered {r.status} for {urlsplit(url).path}")
                return await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise IdentityProviderUnavailable(
                f"the identity provider could not be reached at {urlsplit(url).netloc}") from exc

    async def _exchange(self, code: str, verifier: str) -> dict[str, Any]:
        found = await self.discovery()
        form = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": self.redirect_uri, "code_verifier": verifier}
        # client_secret_basic: each part form-encoded first (RFC 6749, 2.3.1), then Basic.
        pair = f"{quote_plus(self.client_id)}:{quote_plus(self._secret)}".encode()
        auth = {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
        try:
            async with self._client().post(found.token_endpoint, data=form, headers=auth,
                                       timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S),
                                       allow_redirects=False) as r:
                body = await r.json(content_type=None)
                if 400 <= r.status < 500:
                    # A used, expired or forged code; the provider's words stay in the log.
                    reason = body.get("error") if isinstance(body, dict) else None
                    logger.warning("the identity provider refused a code: %s", reason)
                    raise SignInRefused("the identity provider refused the sign-in code: sign "
                                        "in again")
                if r.status != 200 or not isinstance(body, dict):
                    raise IdentityProviderUnavailable(
                        f"the identity provider's token endpoint answered {r.status}")
                return body
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise IdentityProviderUnavailable(
                "the identity provider's token endpoint could not be reached") from exc
