"""The console's signed cookies: the session (a key id, never the key; or a person's session
token), the sign-in flow under way, and the CSRF tokens.

A key's session cookie holds `{"k": key_id, "n": nonce}` signed with a secret derived from the
install's `key_secret`, so every server of an install accepts every other's cookies and nothing
needs storing. The key id is resolved on each request through the gateway's snapshot: a revoked
or expired key ends its sessions at once. A person's holds `{"s": token, "n": nonce}`: the token
of a session kept on the server (`admin.people`), which sign-out ends everywhere. The CSRF
token is an HMAC of the session's nonce, so it needs no storage either and dies with the session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web
from itsdangerous import BadSignature, TimestampSigner, URLSafeTimedSerializer

from llmgw.api.console.oidc import Flow
from llmgw.api.context import over_https

COOKIE = "llmgw_console"
# Before sign-in: a nonce only, so the sign-in form carries a CSRF token too.
PRE_COOKIE = "llmgw_console_pre"
PATH = "/ui"
SESSION_MAX_AGE_S = 8 * 3600
# The most a person's cookie is read at all: their session's own end (`[sso] max_age_s`) comes
# first, and is the server's to enforce.
PERSON_MAX_AGE_S = 30 * 24 * 3600
PRE_MAX_AGE_S = 3600
# While the browser is at the identity provider: the flow's state, nonce and PKCE verifier.
FLOW_COOKIE = "llmgw_console_sso"
FLOW_MAX_AGE_S = 600
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
# Keeps the console's secret apart from every other use of key_secret (the key hashes).
_LABEL = b"llmgw console session v1"


def console_secret(key_secret_hex: str) -> bytes:
    """The console's signing secret, derived from the install's `[server] key_secret`."""
    return hmac.new(bytes.fromhex(key_secret_hex), _LABEL, hashlib.sha256).digest()


@dataclass(frozen=True)
class Session:
    """A signed-in browser: whose key (or which person's server-side session), and the nonce its
    CSRF token is made from."""

    key_id: str | None
    nonce: str
    token: str | None = None  # a person's session token


def _signer(now: Callable[[], float]) -> type[TimestampSigner]:
    class Signer(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(now())

    return Signer


class Sessions:
    """Issues and reads the console's cookies; `now` is the clock (tests move it)."""

    def __init__(self, secret: bytes, now: Callable[[], float] = time.time) -> None:
        self._secret = secret
        self._now = now
        signer = _signer(now)
        self._session = URLSafeTimedSerializer(secret, salt="llmgw-console-session", signer=signer)
        self._pre = URLSafeTimedSerializer(secret, salt="llmgw-console-pre", signer=signer)
        self._flow = URLSafeTimedSerializer(secret, salt="llmgw-console-sso-flow", signer=signer)

    def issue(self, key_id: str) -> str:
        """A new session cookie value for `key_id` (a fresh nonce, so a fresh CSRF token)."""
        return self._session.dumps({"k": key_id, "n": secrets.token_urlsafe(16)})

    def issue_person(self, token: str) -> str:
        """A new session cookie value for a person's server-side session `token`."""
        return self._session.dumps({"s": token, "n": secrets.token_urlsafe(16)})

    def read(self, value: str | None) -> Session | None:
        """The session in a cookie value, or None when it is missing or tampered with; a key's
        older than SESSION_MAX_AGE_S (a person's session ends when the server says: its own
        `[sso] max_age_s`)."""
        if not value:
            return None
        try:  # one check of the signature, whichever kind of session it holds
            data, signed = self._session.loads(value, max_age=PERSON_MAX_AGE_S,
                                               return_timestamp=True)
        except BadSignature:  # SignatureExpired is one too
            return None
        if not isinstance(data, dict) or not isinstance(data.get("n"), str):
            return None
        if isinstance(data.get("s"), str):
            return Session(None, data["n"], data["s"])
        if not isinstance(data.get("k"), str) or \
                int(self._now()) - int(signed.timestamp()) > SESSION_MAX_AGE_S:
            return None
        return Session(data["k"], data["n"])

    def issue_flow(self, flow: Flow) -> str:
        """A cookie value holding a sign-in flow until the provider sends the browser back."""
        return self._flow.dumps(asdict(flow))

    def read_flow(self, value: str | None) -> Flow | None:
        """The flow of a valid flow cookie, else None (missing, tampered with, too old)."""
        data = _loads(self._flow, value, FLOW_MAX_AGE_S)
        try:
            return Flow(**data) if data is not None else None
        except TypeError:
            return None

    def issue_pre(self) -> tuple[str, str]:
        """A pre-sign-in cookie value and its nonce."""
        nonce = secrets.token_urlsafe(16)
        return self._pre.dumps({"n": nonce}), nonce

    def read_pre(self, value: str | None) -> str | None:
        """The nonce of a valid pre-sign-in cookie, else None."""
        data = _loads(self._pre, value, PRE_MAX_AGE_S)
        nonce = data.get("n") if data else None
        return nonce if isinstance(nonce, str) else None

    def csrf(self, nonce: str) -> str:
        """The CSRF token forms and htmx send back for a session (or pre-session) nonce."""
        return hmac.new(self._secret, b"csrf:" + nonce.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, nonce: str, token: str | None) -> bool:
        """Whether `token` is the CSRF token of `nonce` (constant-time)."""
        return bool(token) and hmac.compare_digest(self.csrf(nonce), token or "")


def _loads(serializer: URLSafeTimedSerializer, value: str | None, max_age: int) -> dict[str, Any] | None:
    if not value:
        return None
    try:
        data = serializer.loads(value, max_age=max_age)
    except BadSignature:  # SignatureExpired is one too
        return None
    return data if isinstance(data, dict) else None


def set_cookie(request: web.Request, response: web.StreamResponse, name: str, value: str,
               max_age: int) -> None:
    """Set one of the console's cookies with its flags: HttpOnly, SameSite=Strict, Path=/ui,
    Secure when the request came over https."""
    response.set_cookie(name, value, max_age=max_age, path=PATH, httponly=True, samesite="Strict",
                        secure=over_https(request))


def clear_cookie(request: web.Request, response: web.StreamResponse, name: str) -> None:
    """Expire one of the console's cookies in the browser."""
    response.del_cookie(name, path=PATH, secure=over_https(request), httponly=True, samesite="Strict")
