"""Whether a profile fits on a node, and why not (pure).

The reasons are built here, once, so that the scheduler, the replica keeper and
`ctl model resources` say the same thing about a node. A reason comes as a `Why`: the full
text for that node, and a node-less phrase under which many nodes' reasons can be counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from llmgw.core.types import Node, Profile, Replica, ReplicaState

# A node whose agent has not reported for this long is lost: it gets no new replicas and the
# replicas on it are forgotten and placed elsewhere.
NODE_TIMEOUT = timedelta(seconds=30)


class Why(NamedTuple):
    """Why one node does not take a profile."""

    # The whole reason for this node, e.g. "node n3 lacks label role=judge".
    reason: str
    # The same reason without the node, to count nodes by: "lack label role=judge".
    group: str
    # What a summary that is stored and compared says for this node; differs from `reason` only
    # when `reason` changes with time, so that a summary stays the same while nothing changes.
    terse: str


def _why(reason: str, group: str) -> Why:
    return Why(reason, group, reason)


@dataclass(frozen=True)
class Free:
    """What a node has left for new replicas."""

    cores: int
    memory_gb: float
    gpus: dict[str, int] = field(default_factory=dict)

    def minus(self, cores: int, memory_gb: float, gpu_class: str | None, gpus: int) -> Free:
        """What is left after one more replica holding these."""
        left = dict(self.gpus)
        if gpus:
            cls = self.gpu_class_for(gpu_class, gpus)
            left[cls] = left.get(cls, 0) - gpus
        return Free(self.cores - cores, round(self.memory_gb - memory_gb, 3), left)

    def gpu_class_for(self, gpu_class: str | None, count: int) -> str:
        """The class a replica's GPUs come from: its own, or the first with enough free."""
        return gpu_class_for(self.gpus, gpu_class, count)


def gpu_class_for(free_gpus: Mapping[str, int], gpu_class: str | None, count: int) -> str:
    """The class `count` GPUs come from: `gpu_class` when set, else the first class (by name)
    with enough free, else the first class at all (an overcommitted node)."""
    if gpu_class:
        return gpu_class
    classes = sorted(free_gpus.items())
    return next((c for c, n in classes if n >= count), classes[0][0] if classes else "")


def free_on(node: Node, replicas: list[Replica]) -> Free:
    """A node's capacity minus what its non-stopping replicas hold."""
    free = Free(node.cores, node.memory_gb, dict(node.gpus))
    for r in replicas:
        if r.node_id == node.id and r.state != ReplicaState.STOPPING:
            free = free.minus(r.cpu_cores, r.memory_gb, r.gpu_class, r.gpus)
    return free


def lost(
    node: Node, now: datetime, node_timeout: timedelta = NODE_TIMEOUT,
    watching_since: datetime | None = None,
) -> Why | None:
    """Why `node` counts as lost (no heartbeat within `node_timeout`), or None while it reports.

    Silence from before `watching_since` (when the observer began looking) is not held against
    the node, though the reason still says how long it has really been silent."""
    if node.heartbeat_at is None:
        text = f"node {node.id} is lost (it has never reported)"
        return Why(text, "are lost", f"node {node.id} is lost")
    silent = now - node.heartbeat_at
    if now - max(node.heartbeat_at, watching_since or node.heartbeat_at) <= node_timeout:
        return None
    return Why(
        f"node {node.id} is lost (no heartbeat for {int(silent.total_seconds())}s)",
        "are lost",
        f"node {node.id} is lost",
    )


def closed(node: Node) -> Why | None:
    """Why `node` takes no new replica whatever the profile: cordoned or draining."""
    if node.draining:
        return _why(f"node {node.id} is draining", "are draining")
    if node.cordoned:
        return _why(f"node {node.id} is cordoned", "are cordoned")
    return None


def lacks(profile: Profile, node: Node) -> Why | None:
    """What `node` does not have at all for `profile`, however empty it is: a label, GPUs of
    the class, enough cores or memory."""
    for key, want in profile.node_selector.items():
        if node.labels.get(key) != want:
            return _why(f"node {node.id} lacks label {key}={want}", f"lack label {key}={want}")
    if profile.gpu:
        cls = profile.gpu_class
        total = node.gpus.get(cls, 0) if cls else max(node.gpus.values(), default=0)
        if total < profile.gpu:
            need = f"{profile.gpu} GPU(s) of class {cls or 'any'}"
            return _why(f"needs {need}; node {node.id} has {total}", f"have fewer than {need}")
    if profile.cpu_cores > node.cores:
        return _why(
            f"needs {profile.cpu_cores} cores; node {node.id} has only {node.cores}",
            f"have fewer than {profile.cpu_cores} cores",
        )
    if profile.min_memory_gb > node.memory_gb:
        return _why(
            f"needs {profile.min_memory_gb:g} GB memory; node {node.id} has only "
            f"{node.memory_gb:g} GB",
            f"have less than {profile.min_memory_gb:g} GB memory",
        )
    return None


def gpus_free(profile: Profile, free_gpus: Mapping[str, int]) -> int:
    """How many GPUs `profile` could take from one class of `free_gpus`."""
    cls = profile.gpu_class
    return free_gpus.get(cls, 0) if cls else max(free_gpus.values(), default=0)


# What a node has too little of right now (see `shortfall`).
GPUS, CORES, MEMORY = 1, 2, 3


def shortfall(profile: Profile, cores: int, memory_gb: float, free_gpus: Mapping[str, int]) -> int:
    """0 when `profile` fits in what is free, else the first thing short: GPUS, CORES, MEMORY.
    A `cpu_cores` of 0 reserves no cores, so it is never short of them."""
    if profile.gpu and gpus_free(profile, free_gpus) < profile.gpu:
        return GPUS
    if profile.cpu_cores and profile.cpu_cores > cores:
        return CORES
    if profile.min_memory_gb > memory_gb:
        return MEMORY
    return 0


def short_group(profile: Profile, kind: int) -> str:
    """The node-less phrase for a `shortfall` of `kind`, to count nodes by."""
    if kind == GPUS:
        return f"have fewer than {profile.gpu} GPU(s) of class {profile.gpu_class or 'any'} free"
    if kind == CORES:
        return f"have fewer than {profile.cpu_cores} cores free"
    return f"have less than {profile.min_memory_gb:g} GB memory free"


def short(
    profile: Profile, node: Node, cores: int, memory_gb: float, free_gpus: Mapping[str, int]
) -> Why | None:
    """What `node` has too little of right now for `profile`, with `cores`, `memory_gb` and
    `free_gpus` left after the replicas already there."""
    kind = shortfall(profile, cores, memory_gb, free_gpus)
    if kind == 0:
        return None
    if kind == GPUS:
        cls = profile.gpu_class
        total = node.gpus.get(cls, 0) if cls else max(node.gpus.values(), default=0)
        left = max(gpus_free(profile, free_gpus), 0)
        text = (f"needs {profile.gpu} GPU(s) of class {cls or 'any'}; node {node.id} has "
                f"{left} of {total} free")
    elif kind == CORES:
        text = (f"needs {profile.cpu_cores} cores; node {node.id} has {max(cores, 0)} of "
                f"{node.cores} free")
    else:
        text = (f"needs {profile.min_memory_gb:g} GB memory; node {node.id} has "
                f"{max(memory_gb, 0):g} of {node.memory_gb:g} GB free")
    return _why(text, short_group(profile, kind))


def misfit(profile: Profile, node: Node, free: Free) -> str | None:
    """None when `profile` fits on `node` with `free` left; otherwise why it does not.

    Liveness is not checked here: it needs the time (see `lost`)."""
    why = closed(node) or lacks(profile, node) or short(
        profile, node, free.cores, free.memory_gb, free.gpus
    )
    return why.reason if why else None
