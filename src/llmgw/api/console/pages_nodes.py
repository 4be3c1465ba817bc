"""The nodes page: cordon, uncordon, drain (its progress is the replica count, polled), labels,
and join tokens for new nodes."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llmgw.api.admin.keys import CREATE_KEY
from llmgw.api.admin.nodes import CORDON_NODE, DRAIN_NODE, LABEL_NODE, LIST_NODES, UNCORDON_NODE
from llmgw.api.console import data, forms, render
from llmgw.api.console.access import root, visitor
from llmgw.api.endpoints import Endpoint

HERE = "/ui/nodes"
ACTIONS = {"cordon": CORDON_NODE, "uncordon": UNCORDON_NODE, "drain": DRAIN_NODE}


async def _call(request: web.Request, ep: Endpoint[Any, Any], **kw: Any) -> Any:
    return await data.call(root(request), visitor(request).caller, ep, **kw)


async def _nodes(request: web.Request) -> list[dict[str, Any]]:
    return (await _call(request, LIST_NODES))["data"]  # type: ignore[no-any-return]


async def nodes(request: web.Request, token: dict[str, Any] | None = None) -> web.Response:
    """The nodes table (live), the labels form and the join-token form; `token` is a join token
    just made, shown this once."""
    return render.page(request, "nodes.html", nodes=await _nodes(request), token=token)


async def live(request: web.Request) -> web.Response:
    """The nodes table alone, polled every two seconds (a drain's progress is its replica count)."""
    return render.page(request, "nodes_live.html", nodes=await _nodes(request))


async def act(request: web.Request) -> web.Response:
    """Cordon, uncordon or drain one node."""
    action = ACTIONS.get(request.match_info["action"])
    if action is None:
        raise web.HTTPNotFound()
    await _call(request, action, params={"id": request.match_info["id"]})
    return render.done(request, HERE)


async def label(request: web.Request) -> web.Response:
    """Set and remove labels on one node."""
    form = await forms.read(request)
    node = forms.text(form, "node", required=True) or ""
    await _call(request, LABEL_NODE, params={"id": node},
                body={"set": forms.pairs(form, "set"), "remove": forms.names(form, "remove")})
    return render.done(request, HERE)


async def join_token(request: web.Request) -> web.Response:
    """A node join token (a `node` key): its secret is on this response only."""
    form = await forms.read(request)
    body = forms.given(name=forms.text(form, "name", required=True), scope="node",
                       node_id=forms.text(form, "node_id"))
    created = await _call(request, CREATE_KEY, body=body)
    return await nodes(request, token=created)
