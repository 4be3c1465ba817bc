"""The console's route table and the sub-application `server run` mounts at `/ui`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from llmgw.api.console import (
    pages_guard,
    pages_keys,
    pages_mcp,
    pages_models,
    pages_nodes,
    pages_overview,
    pages_playground,
    pages_routes,
    pages_signin,
    pages_sso,
    pages_teams,
    pages_usage,
    pages_users,
    security,
)
from llmgw.api.console.access import ROOT, SESSIONS, SSO, Need, PageHandler, guarded
from llmgw.api.console.oidc import OidcClient
from llmgw.api.console.session import Sessions, console_secret
from llmgw.api.console.traffic import Traffic
from llmgw.api.errors import unknown_path

PREFIX = "/ui"
STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True)
class Page:
    """One page or form of the console: its method, its path and who may reach it."""

    method: str
    path: str  # below /ui
    handler: PageHandler
    need: Need


PAGES: tuple[Page, ...] = (
    Page("GET", "/signin", pages_signin.signin_form, Need.PUBLIC),
    Page("POST", "/signin", pages_signin.signin, Need.PUBLIC),
    # Public: a person without a role signs out too; it checks the session's CSRF token itself.
    Page("POST", "/signout", pages_signin.signout, Need.PUBLIC),
    Page("GET", "/sso/start", pages_sso.start, Need.PUBLIC),
    Page("GET", "/sso/callback", pages_sso.callback, Need.PUBLIC),
    Page("GET", "/sso/refresh", pages_sso.refresh, Need.PUBLIC),
    Page("GET", "/", pages_overview.overview, Need.SIGNED),
    Page("GET", "/live/overview", pages_overview.live, Need.SIGNED),
    Page("GET", "/models", pages_models.models, Need.ADMIN),
    Page("POST", "/models/add", pages_models.add_model, Need.ADMIN),
    Page("POST", "/models/serve", pages_models.serve, Need.ADMIN),
    Page("POST", "/models/{name:.+}/scale", pages_models.scale, Need.ADMIN),
    Page("POST", "/models/{name:.+}/remove", pages_models.remove, Need.ADMIN),
    Page("GET", "/models/{name:.+}", pages_models.resources, Need.ADMIN),
    Page("GET", "/jobs/{id}/progress", pages_models.job_progress, Need.ADMIN),
    Page("GET", "/nodes", pages_nodes.nodes, Need.ADMIN),
    Page("GET", "/live/nodes", pages_nodes.live, Need.ADMIN),
    Page("POST", "/nodes/labels", pages_nodes.label, Need.ADMIN),
    Page("POST", "/nodes/join-token", pages_nodes.join_token, Need.ADMIN),
    Page("POST", "/nodes/{id}/{action}", pages_nodes.act, Need.ADMIN),
    Page("GET", "/guard", pages_guard.guard, Need.ADMIN),
    Page("POST", "/guard/switches", pages_guard.switch, Need.ADMIN),
    Page("GET", "/guard/new-policy", pages_guard.new_policy, Need.ADMIN),
    Page("POST", "/guard/policies", pages_guard.save_policy, Need.ADMIN),
    Page("GET", "/guard/policies/{name}", pages_guard.policy, Need.ADMIN),
    Page("POST", "/guard/policies/{name}/remove", pages_guard.remove_policy, Need.ADMIN),
    Page("GET", "/guard/verdicts", pages_guard.verdicts, Need.ADMIN),
    Page("POST", "/guard/judgment", pages_guard.judgment, Need.ADMIN),
    Page("GET", "/routes", pages_routes.routes, Need.ADMIN),
    Page("POST", "/routes", pages_routes.add, Need.ADMIN),
    Page("POST", "/routes/{name:.+}/remove", pages_routes.remove, Need.ADMIN),
    Page("GET", "/teams", pages_teams.teams, Need.ADMIN),
    Page("POST", "/teams", pages_teams.add, Need.ADMIN),
    Page("POST", "/teams/{name}/remove", pages_teams.remove, Need.ADMIN),
    Page("GET", "/mcp", pages_mcp.mcp, Need.ADMIN),
    Page("GET", "/mcp/{name}/tools", pages_mcp.tools, Need.ADMIN),
    Page("GET", "/keys", pages_keys.keys, Need.SIGNED),
    Page("POST", "/keys", pages_keys.create, Need.SIGNED),
    Page("POST", "/keys/{id}/revoke", pages_keys.revoke, Need.SIGNED),
    Page("POST", "/keys/{id}/rotate", pages_keys.rotate, Need.ADMIN),
    Page("GET", "/usage", pages_usage.usage, Need.SIGNED),
    Page("GET", "/usage/data", pages_usage.usage_data, Need.SIGNED),
    # Admin keys and admins only: the page is for `visitor.manages`, and the server refuses
    # every other role the calls it makes.
    Page("GET", "/users", pages_users.users, Need.ADMIN),
    Page("POST", "/users/{user}/role", pages_users.set_role, Need.ADMIN),
    Page("POST", "/users/{user}/signout", pages_users.end_sessions, Need.ADMIN),
    Page("POST", "/users/{user}/remove", pages_users.remove, Need.ADMIN),
    Page("GET", "/playground", pages_playground.playground, Need.SIGNED),
    Page("POST", "/playground/chat", pages_playground.chat, Need.SIGNED),
    Page("GET", "/playground/verdicts", pages_playground.verdicts, Need.ADMIN),
)


def console(root: web.Application, sessions: Sessions, sso: OidcClient | None = None) -> web.Application:
    """The console as a sub-application of `root` (whose services it reads), signing people in
    through `sso` when given; mount it with `root.add_subapp(PREFIX, console(root, sessions))`."""
    # Request bodies are bounded by the server's own client_max_size (the request is the root's).
    app = web.Application(middlewares=[security.html_errors])
    app[ROOT] = root
    app[SESSIONS] = sessions
    if sso is not None:
        app[SSO] = sso
    app[pages_overview.TRAFFIC] = Traffic()
    for route in PAGES:
        app.router.add_route(route.method, route.path, guarded(route.need, route.handler))
    app.router.add_static("/static", STATIC)
    app.on_response_prepare.append(security.add_headers)
    return app


# What a client that is not a browser is told at `/`, which serves nothing itself.
ROOT_HINT = ("the OpenAI and Anthropic APIs are under /v1/, the admin API under /admin/v1/, the "
             "web console at /ui/")


async def _root(request: web.Request) -> web.Response:
    """`/`: a browser goes to the console; any other client gets a 404 saying where things are."""
    if "text/html" in request.headers.get("Accept", ""):
        return web.Response(status=302, headers={"Location": PREFIX + "/", "Cache-Control": "no-store",
                                                 **security.HEADERS})
    raise unknown_path(request.path, ROOT_HINT)


async def _home(_request: web.Request) -> web.Response:
    return web.Response(status=308, headers={"Location": PREFIX + "/", "Cache-Control": "no-store",
                                             **security.HEADERS})


def mount(root: web.Application, key_secret_hex: str, sso: OidcClient | None = None) -> None:
    """Serve the console at /ui on `root`, its sessions signed with a secret derived from the
    install's key secret (so every server of the install accepts them)."""
    root.router.add_get("/", _root)
    root.router.add_get(PREFIX, _home)
    root.add_subapp(PREFIX, console(root, Sessions(console_secret(key_secret_hex)), sso))
