"""Identifiers and API keys."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "sk-llmgw-"


def new_id(kind: str) -> str:
    """A short random id with a readable kind prefix, e.g. `rep-3f9a0c1b2d`."""
    return f"{kind}-{secrets.token_hex(5)}"


def new_api_key() -> str:
    """A long random key; 32 random bytes make a keyed hash safe to store without a slow KDF."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_prefix(key: str) -> str:
    """The visible part that identifies a key in lists and logs."""
    return key[: len(KEY_PREFIX) + 4]


def hash_key(secret: bytes, key: str) -> str:
    """Keyed hash of an API key with the install's server-side secret."""
    return hmac.new(secret, key.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def secret_check(secret: bytes) -> str:
    """What the database keeps to tell whether a server's key secret is the install's one
    (without revealing it): a server with another secret could verify none of the keys."""
    return hash_key(secret, "llmgw install key secret check")
