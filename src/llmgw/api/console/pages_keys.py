"""The keys page: the keys this visitor's key may see (an admin key: all; a user key: itself and
the keys it minted), creating one (its secret shown once), revoking, rotating (admin)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.api.admin.keys import CREATE_KEY, LIST_KEYS, REVOKE_KEY, ROTATE_KEY
from llmgw.api.appkeys import GATEWAY
from llmgw.api.console import data, forms, render
from llmgw.api.console.access import root, visitor
from llmgw.api.endpoints import Endpoint
from llmgw.core.errors import NotFound
from llmgw.core.protocol.keys import LiveCounts
from llmgw.core.types import KeyScope, Team

HERE = "/ui/keys"
# The create form's choices, the default first (a user key may mint user keys only).
SCOPES = (KeyScope.USER, KeyScope.ADMIN, KeyScope.METRICS, KeyScope.NODE)


async def _call(request: web.Request, ep: Endpoint[Any, Any], **kw: Any) -> Any:
    return await data.call(root(request), visitor(request).caller, ep, **kw)


# Live counts are looked up for at most this many keys of the page (one look-up each).
LIVE_MAX = 200


async def keys(request: web.Request, created: dict[str, Any] | None = None, action: str = "") -> web.Response:
    """The list and the create form; `created` is a key just made or rotated, shown this once;
    each live key's use of its limits now, as admission counts it."""
    listed = (await _call(request, LIST_KEYS))["data"]
    names = {k["id"]: k["name"] for k in listed}
    limiter = root(request)[GATEWAY].limiter
    live: dict[str, LiveCounts] = {}
    if limiter is not None:
        for k in [k for k in listed if not k["revoked"]][:LIVE_MAX]:
            live[k["id"]] = await limiter.live(k["id"])
    gateway = root(request)[GATEWAY]
    models = {k["id"]: may_call(k, gateway.team(k["team_id"]) if k.get("team_id") else None)
              for k in listed}
    return render.page(request, "keys.html", keys=listed, names=names, created=created, action=action,
                       scopes=SCOPES if visitor(request).admin else (KeyScope.USER,), live=live,
                       models=models)


def may_call(key: dict[str, Any], team: Team | None) -> str:
    """The models a key may call, as the page says them: its own list, else its team's, else
    any (a key's list is within its team's: minting keeps it so)."""
    if key["models"]:
        return ", ".join(key["models"])
    if key.get("team"):
        if team is None:
            return "none: its team is gone"
        if team.models:
            return ", ".join(team.models) + f" (team {team.name}'s)"
    return "any"


async def create(request: web.Request) -> web.Response:
    """A new key minted by the visitor's key, within what that key may grant."""
    form = await forms.read(request)
    limits = forms.given(rpm=forms.integer(form, "rpm"), tpm=forms.integer(form, "tpm"),
                         tokens_per_day=forms.integer(form, "tokens_per_day"))
    body = forms.given(name=forms.text(form, "name", required=True), scope=forms.text(form, "scope"),
                       models=forms.names(form, "models") or None,
                       expires_in_days=forms.number(form, "expires_in_days"),
                       limits=limits or None, note=forms.text(form, "note"),
                       tools=forms.grants(form))
    created = await _call(request, CREATE_KEY, body=body)
    return await keys(request, created, "created")


async def _on_key(request: web.Request, ep: Endpoint[Any, Any]) -> Any:
    try:
        return await _call(request, ep, params={"id": request.match_info["id"]})
    except NotFound:
        # The page names no id: the API's message is for a command line, where the id was typed.
        raise NotFound("There is no such key.") from None


async def revoke(request: web.Request) -> web.Response:
    """Revoke a key and every key beneath it (a key the visitor may not see is a 404, as one that
    does not exist)."""
    await _on_key(request, REVOKE_KEY)
    return render.done(request, HERE)


async def rotate(request: web.Request) -> web.Response:
    """A new secret for a key (admin keys): shown this once."""
    return await keys(request, await _on_key(request, ROTATE_KEY), "rotated")
