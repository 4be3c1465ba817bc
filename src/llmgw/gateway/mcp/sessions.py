"""MCP sessions sealed in their id, so any worker of any server serves any session.

`Mcp-Session-Id` is `v1.PAYLOAD.MAC`: the payload (base64url JSON: the key's id, the negotiated
protocol version, the bundle, the time it was issued) and an HMAC-SHA256 of it with the
install's key secret. Nothing is kept in a process or the store: a session is as good as its
seal, for the key that opened it on the endpoint it was opened on. A session presented with
another key, on another bundle, forged or altered opens as nothing (the endpoint answers 404,
as the spec says for an unknown session). A session ends with its key: a revoked key is refused
before its session is read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

import orjson

_VERSION = "v1"
# What the MAC is made over besides the payload: a seal for nothing else the secret signs.
_DOMAIN = b"llmgw mcp session v1\x00"
# Far longer than any id this module issues; a longer header is refused unread.
MAX_ID_CHARS = 1024


@dataclass(frozen=True, slots=True)
class Session:
    """What a session id says: who opened it, the version it speaks, where, and when."""

    key_id: str
    version: str
    bundle: str | None
    issued: int  # unix seconds


def seal(secret: bytes, session: Session) -> str:
    """The session's id."""
    payload = _b64(orjson.dumps([session.key_id, session.version, session.bundle, session.issued]))
    return f"{_VERSION}.{payload}.{_mac(secret, payload)}"


def unseal(secret: bytes, session_id: str, key_id: str, bundle: str | None) -> Session | None:
    """The session `session_id` holds when its seal is good and it was opened by `key_id` on
    `bundle`; None otherwise (never saying which)."""
    if len(session_id) > MAX_ID_CHARS:
        return None
    version, _, rest = session_id.partition(".")
    payload, _, mac = rest.partition(".")
    if version != _VERSION or not hmac.compare_digest(mac, _mac(secret, payload)):
        return None
    try:
        fields = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return None
    match fields:
        case [str(kid), str(ver), str() | None as bun, int(issued)]:
            found = Session(kid, ver, bun, issued)
        case _:
            return None
    if found.key_id != key_id or found.bundle != bundle:
        return None
    return found


def _mac(secret: bytes, payload: str) -> str:
    return _b64(hmac.new(secret, _DOMAIN + payload.encode(), hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
