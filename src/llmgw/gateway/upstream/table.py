"""The routing table: how each catalog model is served (`Serving`) and why one has no ready
replica. Which of its upstreams one request goes to is `choice`'s."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from llmgw.core import demand
from llmgw.core.demand import WAITING_FOR_ROOM
from llmgw.core.errors import ModelNotFound
from llmgw.core.types import Model, Replica, ReplicaState, Scaling


@dataclass(eq=False)
class Upstream:
    """One place a request can go: a ready replica or a remote provider.

    `outstanding` is mutated by the request path; the same object is kept across table rebuilds
    so counts survive a refresh.
    """

    id: str
    base_url: str
    # Carries the provider's or the install's engine key: never in a repr, so never in a log.
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    outstanding: int = 0
    # How many requests its engine serves at once (a llama-server's `--parallel`); 0 where not
    # known (a remote provider, another engine): the fair-share stage never holds for it.
    slots: int = 0
    # Monotonic time until which a refused connection keeps this upstream last in line: its
    # node may have just died, and the routing table only learns that on the next refresh.
    down_until: float = 0.0
    # Wall-clock time (time.time()) a request last went to or came back from it; 0 for never.
    # The leader reads it (through each server's activity) to stop replicas nobody uses.
    last_used: float = 0.0

    def touch(self) -> None:
        """Note that a request (or a judgment) goes to it or came back from it now."""
        self.last_used = time.time()


@dataclass(frozen=True)
class Serving:
    """How one catalog model is served now: its ready upstreams, or why it has none. (A
    "route" is something else: a public name in front of several models, `core.routes`.)"""

    model: Model
    upstreams: tuple[Upstream, ...]
    # The provider's own name for the model, when the request body must be rewritten.
    upstream_model: str | None = None
    # Why no upstream is ready, for the 503 a client gets.
    unavailable: str = ""
    # The node(s) where a replica of a local model is starting, for what a queued request says.
    loading_on: str | None = None
    # The scheduler's reason when every replica of the model waits for a node none has room on:
    # a request then fails at once instead of queueing for a replica that is not coming.
    nowhere: str = ""
    # Why every replica of the model failed (their engines crash or cannot start): a request is
    # refused at once, not queued for the queue's whole timeout.
    failing: str = ""

    def answering(self, now: float) -> int:
        """How many of its upstreams take a request now (`now`: `time.monotonic()`): ready, and
        none that refused a connection in the last few seconds. A remote provider is always
        "ready"; its answers are its only health check, so one that refuses every connection
        counts as none."""
        return sum(1 for u in self.upstreams if u.down_until <= now)


class RoutingTable:
    """An immutable-per-revision map of model name to Serving."""

    def __init__(self, routes: dict[str, Serving]) -> None:
        self.routes = routes

    def resolve(self, name: str) -> Serving:
        route = self.routes.get(name)
        if route is None:
            raise ModelNotFound(f"The model '{name}' does not exist", param="model")
        return route


def unavailable_reason(replicas: list[Replica], scaling: Scaling | None = None) -> str:
    """Why a local model has no ready replica, in words an operator can act on."""
    if not replicas:
        if scaling is not None and scaling.max == 0:
            return "no replica is placed: scaling.max is 0"
        if scaling is not None and scaling.on_demand:
            return "no replica is placed yet (the model starts on demand)"
        return "no replica is placed (is scaling.min 0?)"
    parts = []
    for r in replicas:
        detail = _gist(r.last_error)
        if r.state == ReplicaState.PENDING:
            parts.append(f"pending: {detail or 'waiting to be placed'}")
        elif r.state == ReplicaState.FAILED:
            parts.append(f"failed: {detail or 'engine stopped'}")
        else:
            parts.append(r.state.value)
    return "; ".join(sorted(set(parts)))


def loading_on(replicas: list[Replica]) -> str | None:
    """The nodes where replicas of a model are starting, or None when none is."""
    return ", ".join(demand.loading_on(replicas)) or None


def nowhere_reason(replicas: list[Replica]) -> str:
    """The scheduler's reasons when every replica is pending on a node none has room on, else
    "": a pending replica without a reason is still being placed."""
    if not replicas or any(r.state != ReplicaState.PENDING or not r.last_error
                           or r.last_error.startswith(WAITING_FOR_ROOM) for r in replicas):
        return ""
    return "; ".join(sorted({_gist(r.last_error) for r in replicas}))


def failing_reason(replicas: list[Replica]) -> str:
    """What the engines died of when every replica of a model is failed, else "": one that is
    starting, ready or still to be placed may yet serve."""
    if not replicas or any(r.state != ReplicaState.FAILED for r in replicas):
        return ""
    return "; ".join(sorted({(r.last_error or "engine stopped").split("\n", 1)[0][:400]
                             for r in replicas}))


def _gist(error: str | None) -> str:
    """First and last lines of an error: what happened, and the engine's last word on why."""
    lines = [ln.strip() for ln in (error or "").splitlines() if ln.strip()]
    if not lines:
        return ""
    text = lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"
    return text if len(text) <= 200 else text[:199] + "…"
