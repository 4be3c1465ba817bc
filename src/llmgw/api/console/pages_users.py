"""The users page: the people who signed in through the identity provider, their roles (set by
hand here), ending their sessions, and forgetting them (admins only: the server checks)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.api.admin.users import END_SESSIONS, LIST_USERS, REMOVE_USER, SET_ROLE
from llmgw.api.console import data, forms, render
from llmgw.api.console.access import root, visitor
from llmgw.api.endpoints import Endpoint
from llmgw.core.errors import InvalidRequest
from llmgw.core.users import Role

HERE = "/ui/users"
# The role form's choices; "" is no access.
ROLES = (Role.ADMIN, Role.OPERATOR, Role.TEAM_ADMIN, Role.VIEWER)


async def _call(request: web.Request, ep: Endpoint[Any, Any], **kw: Any) -> Any:
    return await data.call(root(request), visitor(request).caller, ep, **kw)


async def users(request: web.Request) -> web.Response:
    """The users table, each row with its role form and its buttons."""
    listed = (await _call(request, LIST_USERS))["data"]
    for user in listed:
        role, _, team = (user["role"] or "").partition(":")
        user["grant"] = {"role": role, "team": team}  # the role form's two fields
    return render.page(request, "users.html", users=listed, roles=ROLES)


def role_of(form: forms.Form) -> str | None:
    """The role the form sets, as the API takes it (None: no access)."""
    role = forms.text(form, "role")
    if role != Role.TEAM_ADMIN:
        # The team field keeps a former team admin's team: it is only read for a team admin.
        return role
    team = forms.text(form, "team")
    if team is None:
        raise InvalidRequest("a team admin needs a team: name it", param="team")
    return f"{role}:{team}"


def _user(request: web.Request) -> dict[str, str]:
    return {"user": request.match_info["user"]}


async def set_role(request: web.Request) -> web.Response:
    """Set a user's role by hand: their groups no longer change it, their sessions take it now."""
    form = await forms.read(request)
    await _call(request, SET_ROLE, body={"role": role_of(form)}, params=_user(request))
    return render.done(request, HERE)


async def end_sessions(request: web.Request) -> web.Response:
    """End every console session of a user, on every server."""
    await _call(request, END_SESSIONS, params=_user(request))
    return render.done(request, HERE)


async def remove(request: web.Request) -> web.Response:
    """Forget a user and end their sessions (they may sign in again, as new)."""
    await _call(request, REMOVE_USER, params=_user(request))
    return render.done(request, HERE)
