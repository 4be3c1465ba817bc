"""`llmgw ctl node …`: nodes' status, labels, cordon, drain, removal, and join tokens."""

from __future__ import annotations

import re
import secrets
import time
import urllib.parse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from llmgw.cli import render
from llmgw.cli.context import CtlContext, body, options_for, parse, query
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.keys import KeyCreated, KeyOut, KeyRequest, KeyRevoked
from llmgw.core.protocol.nodes import LabelRequest, NodeDetailOut, NodeOut, NodeRemoved, NodeRemoveQuery
from llmgw.core.types import KeyScope, Replica, ReplicaState

node_app = typer.Typer(help="Machines that run replicas: status, labels, cordon, drain, remove.",
                       no_args_is_help=True)
token_app = typer.Typer(help="Join tokens: the key a new machine's `llmgw node run` presents.",
                        no_args_is_help=True)

NodeId = Annotated[str, typer.Argument(help="The node's id, as `ctl node list` shows it.")]
POLL_S = 1.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([mhdw])$")
_DAYS_PER_UNIT = {"m": 1 / 1440, "h": 1 / 24, "d": 1.0, "w": 7.0}
TOKEN_ENV = "LLMGW_NODE_TOKEN"
AGENT_COMES_BACK = ("if its agent is still running, the node registers again on its next "
                    "report: stop `llmgw node run` on that machine to retire it")


def _path(node_id: str, suffix: str = "") -> str:
    return f"/admin/v1/nodes/{urllib.parse.quote(node_id, safe='')}{suffix}"


def ago(seconds: float | None) -> str:
    """A heartbeat age as people say it: `3s ago`, `5m ago`, `never`."""
    if seconds is None:
        return "never"
    s = max(int(seconds), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit} ago"
    return f"{s}s ago"


def _gpus(n: NodeOut) -> str:
    return ", ".join(f"{cls}×{count}" for cls, count in sorted(n.gpus.items())) or "-"


def _labels(n: NodeOut) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(n.labels.items())) or "-"


def _nodes_table(nodes: Sequence[NodeOut]) -> None:
    render.table(
        "nodes",
        ["id", "status", "address", "cores", "memory GB", "GPUs", "labels", "replicas",
         "last heartbeat"],
        [[n.id, n.status, n.address, n.cores, n.memory_gb, _gpus(n), _labels(n), n.replica_count,
          ago(n.heartbeat_age_s)] for n in nodes],
    )


def _say(text: str) -> None:
    render.console.print(text, highlight=False)


@node_app.command("list")
def node_list(ctx: typer.Context) -> None:
    """Every node: status (ready, cordoned, draining, lost), hardware, labels, replicas."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(DataList[NodeOut], ctl.call("GET", "/admin/v1/nodes"), lambda d: _nodes_table(d.data))


@node_app.command("show")
def node_show(ctx: typer.Context, node_id: NodeId) -> None:
    """One node in full, with the replicas placed on it."""
    ctl = CtlContext.of(ctx)

    def detail(n: NodeDetailOut) -> None:
        _nodes_table([n])
        if n.devices:
            _gpu_table(n)
        render.table(
            f"replicas on {n.id}",
            ["id", "model", "profile", "state", "endpoint", "restarts", "last error"],
            [[r.id, r.model, r.profile or "-", r.state, r.endpoint or "", r.restarts,
              (r.last_error or "").split("\n", 1)[0]] for r in n.replicas],
        )

    ctl.show_as(NodeDetailOut, ctl.call("GET", _path(node_id)), detail)


def _gpu_table(n: NodeOut) -> None:
    """Each GPU as the node's last report measured it (declared ones: their class alone)."""

    def measured(value: float | None, fmt: str) -> str:
        return fmt.format(value) if value is not None else "-"

    render.table(
        f"GPUs on {n.id}",
        ["index", "class", "name", "uuid", "memory GB (used / total)", "free GB", "utilisation",
         "temperature", "compute capability"],
        [[g.index, g.gpu_class, g.name or "-", g.uuid,
          "declared" if g.declared else f"{measured(g.memory_used_gb, '{:.1f}')} / {g.memory_gb:.1f}",
          measured(g.free_gb, "{:.1f}"), measured(g.utilization, "{:.0%}"),
          measured(g.temperature_c, "{:.0f} °C"), g.compute_capability or "-"]
         for g in n.devices],
    )


def _label_changes(changes: list[str]) -> LabelRequest:
    """`key=value` sets (the value may be empty), `key-` removes."""
    labels: dict[str, str] = {}
    remove: list[str] = []
    for change in changes:
        key, sep, value = change.partition("=")
        if sep and key:
            labels[key] = value
        elif not sep and len(change) > 1 and change.endswith("-"):
            remove.append(change[:-1])
        else:
            render.error(f"{change!r}: write key=value to set a label, key- to remove one")
            raise typer.Exit(2)
    return LabelRequest(set=labels, remove=remove)


@node_app.command("label")
def node_label(
    ctx: typer.Context,
    node_id: NodeId,
    changes: Annotated[list[str], typer.Argument(
        help="key=value to set (value may be empty), key- to remove.", show_default=False)],
) -> None:
    """Set or remove a node's labels, which profiles' node selectors match.

    Keys are 1-63 letters, digits and . _ / - (starting and ending with a letter or digit);
    values up to 63 of the same, or empty. A label the node's agent declares (`llmgw node run
    --label`) is applied again on its next report, so remove it there."""
    ctl = CtlContext.of(ctx)
    data = ctl.call("POST", _path(node_id, "/labels"), body(_label_changes(changes)))
    ctl.show_as(NodeOut, data, lambda n: _say(f"node {n.id}: labels {_labels(n)}"))


@node_app.command("cordon")
def node_cordon(ctx: typer.Context, node_id: NodeId) -> None:
    """No new replicas on this node; those it runs keep running."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(NodeOut, ctl.call("POST", _path(node_id, "/cordon")), lambda n: _say(
        f"node {n.id}: {n.status}; no new replicas, {n.replica_count} keep running"))


@node_app.command("uncordon")
def node_uncordon(ctx: typer.Context, node_id: NodeId) -> None:
    """Let the node take new replicas again (this also ends a drain)."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(NodeOut, ctl.call("POST", _path(node_id, "/uncordon")),
                lambda n: _say(f"node {n.id}: {n.status}; takes new replicas"))


@node_app.command("drain")
def node_drain(
    ctx: typer.Context,
    node_id: NodeId,
    wait: Annotated[bool, typer.Option(help="Wait until the node has no replicas left.")] = False,
    timeout: Annotated[float, typer.Option(help="With --wait: give up after this many seconds.")]
    = 600.0,
) -> None:
    """Cordon the node and move its replicas to other nodes (the keeper stops them here and
    places them elsewhere). Remove the node once it is empty."""
    ctl = CtlContext.of(ctx)
    answer = ctl.call("POST", _path(node_id, "/drain"))
    if not wait:
        ctl.show_as(NodeOut, answer, lambda n: _say(
            f"node {n.id}: draining, {n.replica_count} replica(s) to move; follow it with "
            f"`llmgw ctl node drain {n.id} --wait`"))
        return
    answer = _wait_drained(ctl, answer, timeout)
    ctl.show_as(NodeDetailOut, answer, lambda n: _say(
        f"node {n.id}: drained, no replicas left; remove it with `llmgw ctl node remove {n.id}`"))


def _wait_drained(ctl: CtlContext, answer: Any, timeout_s: float) -> Any:
    """Poll until the node in `answer` has no replicas, printing a line each time the count
    changes; exit 1 on timeout or when the drain is called off. Returns the node's detail, as
    read last."""
    deadline = time.monotonic() + timeout_s
    shown: int | None = None
    node = parse(NodeOut, answer)
    answer = ctl.call("GET", _path(node.id))
    node = parse(NodeDetailOut, answer)
    while node.replica_count:
        if node.status not in ("draining", "lost"):
            render.error(f"node {node.id} is {node.status} now: the drain was called off")
            raise typer.Exit(1)
        if node.replica_count != shown and not ctl.json:
            shown = node.replica_count
            _say(f"draining {node.id}: {shown} replica(s) left")
        if time.monotonic() >= deadline:
            render.error(f"node {node.id} still has {node.replica_count} replica(s) "
                         f"after {timeout_s:g}s{_held_by(ctl, node.id)}")
            raise typer.Exit(1)
        time.sleep(POLL_S)
        answer = ctl.call("GET", _path(node.id))
        node = parse(NodeDetailOut, answer)
    return answer


def _held_by(ctl: CtlContext, node_id: str) -> str:
    """Why a drain is stuck: a replica here stays until its replacement is ready elsewhere."""
    here = parse(NodeDetailOut, ctl.call("GET", _path(node_id))).replicas
    models = {r.model for r in here if r.state != ReplicaState.STOPPING}
    replicas = parse(DataList[Replica], ctl.call("GET", "/admin/v1/replicas")).data
    waiting = [r for r in replicas if r.model in models and r.state == ReplicaState.PENDING]
    return "".join(f"\n  {r.model}: its replacement is pending: {r.last_error}" for r in waiting)


@node_app.command("remove")
def node_remove(
    ctx: typer.Context,
    node_id: NodeId,
    force: Annotated[bool, typer.Option(
        help="Remove it even though it reports and still runs replicas.")] = False,
) -> None:
    """Forget a node and its replicas, which the keeper places elsewhere.

    Refused while the node reports and still has replicas: drain it first, or pass --force. A
    lost node goes at once. If its agent is still running, the node registers again on its next
    report: stop `llmgw node run` on that machine to retire it."""
    ctl = CtlContext.of(ctx)
    path = _path(node_id) + query(NodeRemoveQuery(force=True) if force else NodeRemoveQuery())
    ctl.show_as(NodeRemoved, ctl.call("DELETE", path),
                lambda d: _say(f"removed node {d.id}; {AGENT_COMES_BACK}"))


def _expiry(expires: str | None) -> dict[str, Any]:
    """`30d`, `12h`, `90m`, `2w`, or an ISO date or time (UTC unless it says otherwise)."""
    if not expires:
        return {}
    m = _DURATION.match(expires.strip())
    if m:
        return {"expires_in_days": float(m.group(1)) * _DAYS_PER_UNIT[m.group(2)]}
    try:
        at = datetime.fromisoformat(expires.strip())
    except ValueError:
        render.error(f"--expires {expires!r}: give a duration (90m, 12h, 30d, 2w) or an ISO date")
        raise typer.Exit(2) from None
    return {"expires_at": at if at.tzinfo else at.replace(tzinfo=UTC)}


def _tokens_table(keys: Sequence[KeyOut]) -> None:
    render.table(
        "node tokens",
        ["id", "name", "token", "node", "expires", "revoked", "by", "created"],
        [[k.id, k.name, k.label, k.node_id or "-", render.when(k.expires_at, "never"),
          "yes" if k.revoked else "", k.by, render.when(k.created_at)] for k in keys],
    )


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Option(help="A name for the token; default: node-DATE-RANDOM.")]
    = None,
    node: Annotated[str | None, typer.Option(
        help="The node id it may report as; default: the node of its first report.")] = None,
    expires: Annotated[str | None, typer.Option(
        help="When it stops working: a duration (90m, 12h, 30d, 2w) or an ISO date; "
             "default: never.")] = None,
) -> None:
    """Create a join token (shown once) and print how to run the agent on the new machine.

    A token joins one machine: it reports only as the node it is bound to (`--node`, or the
    node of its first report). It reaches the agent API only: it cannot call models or the
    admin API. The agent reads it from LLMGW_NODE_TOKEN, which keeps it out of shell history
    and `ps`."""
    ctl = CtlContext.of(ctx)
    # Names of live keys are unique: a default must not collide with a token made the same second.
    default = f"node-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    fields = {**_expiry(expires), **({"node_id": node} if node else {})}
    with options_for({"name": "--name", "node_id": "--node", "expires_in_days": "--expires",
                      "expires_at": "--expires"}):
        request = KeyRequest(name=name or default, scope=KeyScope.NODE, **fields)
    key = ctl.call("POST", "/admin/v1/keys", body(request))
    # The secret goes in the environment, never on the command line printed here.
    command = f"llmgw node run --server {ctl.server_url()}" + (f" --node-id {node}" if node else "")

    def text(_: Any) -> None:
        k = parse(KeyCreated, key)
        until = f"expires {render.when(k.expires_at)}" if k.expires_at else "does not expire"
        bound = f"for node {k.node_id}" if k.node_id else "bound to the node of its first report"
        _say(f"node token {k.name} ({k.id}), {bound}, {until}\n\n  {k.key}\n\n"
             "shown once: store it now. On the new machine, give it to the agent in its "
             "environment (a command line stays in shell history and `ps`): paste it at the "
             f"prompt of the first line, then run the second:\n\n"
             f"  read -rs {TOKEN_ENV} && export {TOKEN_ENV}\n  {command}\n")

    # For scripts: the server's answer, with the command to run and the env var it reads.
    ctl.show({**key, "command": command, "env": TOKEN_ENV}, text)


@token_app.command("list")
def token_list(ctx: typer.Context) -> None:
    """Join tokens (prefix and last four characters only); other keys are in `ctl key list`."""
    ctl = CtlContext.of(ctx)
    keys = ctl.call("GET", "/admin/v1/keys")["data"]
    ctl.show_as(DataList[KeyOut], {"data": [k for k in keys if k["scope"] == KeyScope.NODE]},
                lambda d: _tokens_table(d.data))


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    token: Annotated[str, typer.Argument(help="The token's id, name or visible prefix.")],
) -> None:
    """Revoke a join token: agents presenting it are refused from then on."""
    ctl = CtlContext.of(ctx)
    ref = urllib.parse.quote(token, safe="")
    key = parse(KeyOut, ctl.call("GET", f"/admin/v1/keys/{ref}"))
    if key.scope != KeyScope.NODE:
        render.error(f"{key.name} ({key.label}) is a {key.scope} key, not a node token: "
                     "revoke it with `llmgw ctl key revoke`")
        raise typer.Exit(1)
    ctl.show_as(KeyRevoked, ctl.call("POST", f"/admin/v1/keys/{urllib.parse.quote(key.id, safe='')}/revoke"),
                lambda k: _say(f"revoked node token {k.name} ({k.label})"))
