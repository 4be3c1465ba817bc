"""Rendering the console's Jinja2 templates into responses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

from llmgw.api.console.visitor import VISITOR, Visitor
from llmgw.core.devices import named
from llmgw.core.types import Gpu

_ENV = Environment(loader=PackageLoader("llmgw.api.console", "templates"),
                   autoescape=select_autoescape(default=True, default_for_string=True),
                   trim_blocks=True, lstrip_blocks=True)

# The nav: (path, label, the Visitor property that shows it; None: everyone). It only hides what
# the server would refuse anyway.
NAV = (
    ("/ui/", "Overview", None),
    ("/ui/models", "Models", "admin"),
    ("/ui/nodes", "Nodes", "admin"),
    ("/ui/guard", "Guard", "admin"),
    ("/ui/routes", "Routes", "admin"),
    ("/ui/teams", "Teams", "admin"),
    ("/ui/mcp", "MCP", "manages"),
    ("/ui/keys", "Keys", "sees_keys"),
    ("/ui/usage", "Usage", "sees_keys"),
    ("/ui/users", "Users", "manages"),
    ("/ui/playground", "Playground", "plays"),
)


def _when(value: datetime | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")
        except ValueError:
            return value
    return value.strftime("%Y-%m-%d %H:%M:%S")


def _size(n: float | int | None) -> str:
    """Bytes as people read them: 512 B, 1.5 MB, 3.2 GB."""
    if n is None:
        return ""
    size, unit = float(n), "B"
    for bigger in ("KB", "MB", "GB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"


def _devices(replica: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> str:
    """A replica's GPUs (`h200:0`) as the admin API's replica and nodes say."""
    node = next((n for n in nodes if n.get("id") == replica.get("node_id")), None)
    known = [Gpu.model_validate(g) for g in (node or {}).get("devices") or []]
    return named(replica.get("devices") or [], known)


_ENV.filters["when"] = _when
_ENV.filters["size"] = _size
_ENV.filters["devices"] = _devices


def html(template: str, context: Mapping[str, Any]) -> str:
    """A template rendered with `context`."""
    return _ENV.get_template(template).render(**context)


def page(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    """A page (or a fragment) for the signed-in visitor, if any: nav, whoami and CSRF token come
    from the request."""
    visitor: Visitor | None = request.get(VISITOR)
    nav = [(path, label) for path, label, shown in NAV
           if visitor is not None and (shown is None or getattr(visitor, shown))]
    body = html(template, {"visitor": visitor, "nav": nav, "path": request.path, **context})
    return web.Response(text=body, status=status, content_type="text/html", charset="utf-8")


def error(request: web.Request, status: int, message: str) -> web.Response:
    """An error page with its message only."""
    return page(request, "error.html", status=status, status_code=status, message=message)


def done(request: web.Request, location: str) -> web.Response:
    """After a form did its work: 303 to `location`; htmx requests get `HX-Redirect` instead (a
    redirect of its XHR would only swap the page in)."""
    if request.headers.get("HX-Request") == "true":
        return web.Response(status=200, headers={"HX-Redirect": location})
    return web.Response(status=303, headers={"Location": location})
