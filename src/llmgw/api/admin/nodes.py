"""Nodes in the admin API: `/admin/v1/nodes`, admin keys only."""

from __future__ import annotations

from typing import Any

from llmgw.api.appkeys import NODES
from llmgw.api.endpoints import Call, Endpoint
from llmgw.control.node_admin import NodeView
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.nodes import LabelRequest, NodeDetailOut, NodeOut, NodeRemoved, NodeRemoveQuery

TAG = "admin"


def node_out(view: NodeView) -> NodeOut:
    """A node as the API shows it: its row, plus status, heartbeat age and replica count."""
    return NodeOut(**dict(view.node), status=view.status.value, heartbeat_age_s=view.heartbeat_age_s,
                   replica_count=view.replica_count)


async def list_nodes(call: Call[None, None]) -> DataList[NodeOut]:
    return DataList(data=[node_out(v) for v in await call.app[NODES].list()])


async def show_node(call: Call[None, None]) -> NodeDetailOut:
    detail = await call.app[NODES].show(call.params["id"])
    return NodeDetailOut(**dict(node_out(detail.view)), replicas=detail.replicas)


async def label_node(call: Call[LabelRequest, None]) -> NodeOut:
    return node_out(await call.app[NODES].label(call.params["id"], call.body.set, call.body.remove))


async def cordon_node(call: Call[None, None]) -> NodeOut:
    return node_out(await call.app[NODES].cordon(call.params["id"]))


async def uncordon_node(call: Call[None, None]) -> NodeOut:
    return node_out(await call.app[NODES].uncordon(call.params["id"]))


async def drain_node(call: Call[None, None]) -> NodeOut:
    return node_out(await call.app[NODES].drain(call.params["id"]))


async def remove_node(call: Call[None, NodeRemoveQuery]) -> NodeRemoved:
    node_id = call.params["id"]
    await call.app[NODES].remove(node_id, force=call.query.force)
    return NodeRemoved(id=node_id)


LIST_NODES = Endpoint("list_nodes", "GET", "/admin/v1/nodes", "List nodes with their status", TAG,
                      list_nodes, returns=DataList[NodeOut])
SHOW_NODE = Endpoint("show_node", "GET", "/admin/v1/nodes/{id}", "Show a node and its replicas", TAG,
                     show_node, returns=NodeDetailOut)
REMOVE_NODE = Endpoint("remove_node", "DELETE", "/admin/v1/nodes/{id}",
                       "Remove a node (refused while it runs replicas, unless force)", TAG,
                       remove_node, query=NodeRemoveQuery, returns=NodeRemoved)
LABEL_NODE = Endpoint("label_node", "POST", "/admin/v1/nodes/{id}/labels",
                      "Set and remove node labels", TAG, label_node, body=LabelRequest,
                      returns=NodeOut, example={"set": {"zone": "eu-1"}, "remove": ["old"]})
CORDON_NODE = Endpoint("cordon_node", "POST", "/admin/v1/nodes/{id}/cordon",
                       "Cordon a node: no new replicas", TAG, cordon_node, returns=NodeOut)
UNCORDON_NODE = Endpoint("uncordon_node", "POST", "/admin/v1/nodes/{id}/uncordon",
                         "Uncordon a node (ends a drain)", TAG, uncordon_node, returns=NodeOut)
DRAIN_NODE = Endpoint("drain_node", "POST", "/admin/v1/nodes/{id}/drain",
                      "Drain a node: its replicas move elsewhere", TAG, drain_node, returns=NodeOut)

ENDPOINTS: list[Endpoint[Any, Any]] = [
    LIST_NODES, SHOW_NODE, REMOVE_NODE, LABEL_NODE, CORDON_NODE, UNCORDON_NODE, DRAIN_NODE,
]
