"""The console's route table and the sub-application `server run` mounts at `/ui`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from llmgw.api.console import pages_overview, pages_signin, security
from llmgw.api.console.access import ROOT, SESSIONS, Need, PageHandler, guarded
from llmgw.api.console.session import Sessions, console_secret
from llmgw.api.console.traffic import Traffic

PREFIX = "/ui"
STATIC = Path(__file__).parent / "static"
# Form posts are small; the playground's JSON is bounded by the data plane's own limits anyway.
MAX_FORM_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # below /ui
    handler: PageHandler
    need: Need


ROUTES: tuple[Route, ...] = (
    Route("GET", "/signin", pages_signin.signin_form, Need.PUBLIC),
    Route("POST", "/signin", pages_signin.signin, Need.PUBLIC),
    Route("POST", "/signout", pages_signin.signout, Need.SIGNED),
    Route("GET", "/", pages_overview.overview, Need.SIGNED),
    Route("GET", "/live/overview", pages_overview.live, Need.SIGNED),
)


def console(root: web.Application, sessions: Sessions) -> web.Application:
    """The console as a sub-application of `root` (whose services it reads); mount it with
    `root.add_subapp(PREFIX, console(root, sessions))`."""
    app = web.Application(middlewares=[security.html_errors], client_max_size=MAX_FORM_BYTES)
    app[ROOT] = root
    app[SESSIONS] = sessions
    app[pages_overview.TRAFFIC] = Traffic()
    for route in ROUTES:
        app.router.add_route(route.method, route.path, guarded(route.need, route.handler))
    app.router.add_static("/static", STATIC)
    app.on_response_prepare.append(security.add_headers)
    return app


async def _home(_request: web.Request) -> web.Response:
    return web.Response(status=308, headers={"Location": PREFIX + "/", "Cache-Control": "no-store",
                                             **security.HEADERS})


def mount(root: web.Application, key_secret_hex: str) -> None:
    """Serve the console at /ui on `root`, its sessions signed with a secret derived from the
    install's key secret (so every server of the install accepts them)."""
    root.router.add_get(PREFIX, _home)
    root.add_subapp(PREFIX, console(root, Sessions(console_secret(key_secret_hex))))
