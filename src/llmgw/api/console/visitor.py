"""Who is looking at the console: the signed-in key and its CSRF token, attached to the request."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from llmgw.core.types import ApiKey, KeyScope


@dataclass(frozen=True)
class Visitor:
    """A signed-in browser's key (as the gateway's snapshot has it now) and CSRF token."""

    key: ApiKey
    csrf: str

    @property
    def admin(self) -> bool:
        return self.key.scope == KeyScope.ADMIN


VISITOR = web.RequestKey("console_visitor", Visitor)
