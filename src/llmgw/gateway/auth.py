"""Authenticating requests against the in-memory key cache."""

from __future__ import annotations

import fnmatch
from datetime import datetime

from llmgw.core.errors import Forbidden, Unauthenticated
from llmgw.core.ids import hash_key
from llmgw.core.types import ApiKey, KeyScope


class KeyCache:
    """Keys by their keyed hash; rebuilt from the store when the revision changes."""

    def __init__(self, secret: bytes, keys: list[ApiKey]) -> None:
        self._secret = secret
        self._by_hash = {k.hash: k for k in keys}

    def authenticate(self, authorization: str | None, now: datetime) -> ApiKey:
        """The key for an `Authorization: Bearer …` header, or Unauthenticated."""
        if not authorization:
            raise Unauthenticated(
                "Missing API key: send it as 'Authorization: Bearer <key>'", code="missing_api_key"
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("Authorization header must be 'Bearer <key>'")
        # A dict lookup on the keyed hash: the hash comparison is not a prefix-revealing
        # string compare of the secret itself.
        key = self._by_hash.get(hash_key(self._secret, token.strip()))
        if key is None or key.revoked:
            raise Unauthenticated("Incorrect API key provided")
        if key.expires_at is not None and key.expires_at <= now:
            raise Unauthenticated("API key has expired", code="expired_api_key")
        return key


def require_admin(key: ApiKey) -> None:
    """Admin endpoints take admin keys only."""
    if key.scope != KeyScope.ADMIN:
        raise Forbidden("this endpoint needs an admin key")


def require_scraper(key: ApiKey) -> None:
    """A keyed `/metrics` takes admin keys and metrics keys."""
    if key.scope not in (KeyScope.ADMIN, KeyScope.METRICS):
        raise Forbidden("/metrics needs an admin key or a metrics key")


def may_use(key: ApiKey, model: str) -> bool:
    """Whether `key` may call `model`; admin keys and keys without a model list may use any,
    node join tokens none."""
    if key.scope == KeyScope.NODE:
        return False
    if key.scope == KeyScope.ADMIN or not key.models:
        return True
    return any(fnmatch.fnmatchcase(model, pattern) for pattern in key.models)
