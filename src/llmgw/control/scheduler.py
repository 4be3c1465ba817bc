"""The scheduler: where a replica of a model goes (pure; the one place that decides it).

For each profile of the model, in order, it **filters** the nodes (lost, cordoned, draining,
node selector labels, GPU class and count), checks what **fits** after the replicas already on
each node (free cores, memory, GPUs), and **scores** the rest: fewest replicas of this same
model first (spread), then the node left with the least free memory, then the least free cores
(pack), then the node id. The first profile that fits on some node wins. When none fits, the
answer carries the reason for every node per profile and a bounded one-line summary.

A GPU profile also needs `gpu` devices of its class that fit it on the node (see
`control.devices`): the placement names them, and nothing else goes on them unless both
profiles share.

A `Cluster` is built once per plan from plain data. Placing a replica updates it, so the next
decision in the same plan sees what the previous ones took; nothing outside the plan sees it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice

from llmgw.control.devices import Devices, need_of
from llmgw.control.placement import (
    CORES,
    GPUS,
    MEMORY,
    NODE_TIMEOUT,
    Why,
    closed,
    lacks,
    lost,
    short,
    short_group,
    shortfall,
)
from llmgw.core.types import Model, Node, Profile, Replica, ReplicaState

# In a summary, more nodes than this with the same reason are counted rather than named.
NAME_UP_TO = 3
# Parts of one profile's summary before the rest is only counted.
PARTS_PER_PROFILE = 6
# A summary is stored as a replica's last_error and shown in tables: keep it bounded.
SUMMARY_MAX = 1000


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a replica goes: the node, the profile it runs with, and the GPU class and devices
    (UUIDs) it takes."""

    node_id: str
    profile: Profile
    gpu_class: str | None = None
    devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why one profile does not go on one node."""

    profile: str
    node_id: str
    reason: str


# A node that passes the filter but has too little free, as it was at the decision: free
# cores, free memory, free GPUs and the `shortfall` kind, or, when it is short of none of them,
# why its devices do not fit. Rendered to a reason on demand.
_Snap = tuple[int, float, Mapping[str, int], int, Why | None]
_Item = Why | _Snap


class Unschedulable:
    """No profile fits on any node: a one-line `summary` (bounded, stable while nothing
    changes, fit for `Replica.last_error`) and `rejections`, every node's reason per profile."""

    __slots__ = ("summary", "_nodes", "_found", "_rejections")

    def __init__(
        self, summary: str, nodes: list[Node], found: list[tuple[Profile, list[_Item]]]
    ) -> None:
        self.summary = summary
        self._nodes = nodes
        self._found = found
        self._rejections: tuple[Rejection, ...] | None = None

    @property
    def rejections(self) -> tuple[Rejection, ...]:
        """(profile, node id, reason) for every profile and node, in order."""
        # Built on demand: the keeper needs only the summary, and on a big cluster the full
        # list costs more than the decision itself.
        if self._rejections is None:
            self._rejections = tuple(
                Rejection(p.name, n.id, _render(p, n, item).reason)
                for p, items in self._found
                for n, item in zip(self._nodes, items, strict=True)
            )
        return self._rejections

    def __repr__(self) -> str:
        return f"Unschedulable({self.summary!r})"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether one profile fits on one node right now; `reason` is None when it does."""

    profile: str
    node_id: str
    reason: str | None


Decision = Placement | Unschedulable

# A node's place in a pool's sorted list: free memory, free cores, node id, index. Sorted
# ascending, the first entry that fits is the fullest one (packing), ties by id.
_Entry = tuple[float, int, str, int]
# Nodes that pass a profile's label selector and have the GPUs at all, whatever is free.
_PoolKey = tuple[tuple[tuple[str, str], ...], str | None, int]
# Everything about a profile that decides where it goes.
_StaticKey = tuple[tuple[tuple[str, str], ...], str | None, int, int, float, bool, float | None]


class _Slot:
    """One node's capacity left in this plan."""

    __slots__ = ("node", "cores", "memory", "devices", "entry", "pools", "why")

    def __init__(self, node: Node, index: int, why: Why | None) -> None:
        self.node = node
        self.cores = node.cores
        self.memory = node.memory_gb
        self.devices = Devices(node)
        self.entry: _Entry = (node.memory_gb, node.cores, node.id, index)
        self.pools: list[list[_Entry]] = []
        # Lost, cordoned or draining: no profile goes here.
        self.why = why

    def hold(self, cores: int, memory_gb: float) -> None:
        self.cores -= cores
        # Rounded like `Free.minus`, so the numbers in reasons carry no float noise.
        self.memory = round(self.memory - memory_gb, 3)

    def resort(self) -> None:
        old = self.entry
        self.entry = (self.memory, self.cores, old[2], old[3])
        for entries in self.pools:
            del entries[bisect_left(entries, old)]
            insort(entries, self.entry)


class Cluster:
    """The nodes as one plan sees them: what each has free, and how many replicas of each
    model it runs. Built from plain data; `take` records a placement made in the plan."""

    def __init__(
        self,
        nodes: Iterable[Node],
        replicas: Iterable[Replica],
        now: datetime,
        node_timeout: timedelta = NODE_TIMEOUT,
        judge_machine: Mapping[str, str] | None = None,
        watching_since: datetime | None = None,
        models: Iterable[Model] = (),
    ) -> None:
        """`models`: the catalog, for what the replicas' profiles need on their devices (a
        replica whose profile is not found holds its devices alone)."""
        self.node_timeout = node_timeout
        self._profiles = {(m.name, p.name): p for m in models for p in m.profiles}
        # The devices each replica holds, as recorded when the plan began.
        self._held: dict[str, tuple[str, ...]] = {}
        self._slots: list[_Slot] = []
        # Nodes carrying the judge machine's labels: other models go there only when they fit
        # nowhere else, so packing does not crowd the judge every judgment waits on.
        self._reserved: frozenset[int] = frozenset()
        self._index: dict[str, int] = {}
        # How many nodes report, cordoned or not: with none, that is all a summary needs say.
        self.reporting = 0
        for node in nodes:
            if node.id in self._index:
                continue
            i = len(self._slots)
            self._index[node.id] = i
            gone = lost(node, now, node_timeout, watching_since)
            self.reporting += gone is None
            self._slots.append(_Slot(node, i, gone or closed(node)))
        if judge_machine:
            self._reserved = frozenset(
                i for i, s in enumerate(self._slots)
                if all(s.node.labels.get(k) == v for k, v in judge_machine.items()))
        self._counts: dict[str, dict[int, int]] = {}
        for r in replicas:
            if r.node_id is None or r.state == ReplicaState.STOPPING:
                continue
            i = self._index.get(r.node_id, -1)
            if i < 0:
                continue
            slot = self._slots[i]
            slot.hold(r.cpu_cores, r.memory_gb)
            need, share = need_of(self._profile(r))
            self._held[r.id] = slot.devices.hold_placed(r.devices, r.gpu_class, r.gpus, need,
                                                        share)
            slot.entry = (slot.memory, slot.cores, slot.node.id, i)
            per_node = self._counts.setdefault(r.model, {})
            per_node[i] = per_node.get(i, 0) + 1
        self._pools: dict[_PoolKey, list[_Entry]] = {}
        self._lacks: dict[_StaticKey, list[Why | None]] = {}
        self._nowhere: dict[tuple[tuple[str, _StaticKey], ...], Unschedulable] = {}

    def schedule(self, model: Model) -> Decision:
        """Where the next replica of `model` goes, or why it goes nowhere. Changes nothing."""
        counts = self._counts.get(model.name, {})
        avoid = frozenset() if model.guard else self._reserved
        for profile in model.profiles:
            pool = self._pool(profile)
            i = self._best(profile, pool, counts, avoid)
            if i is None and avoid:
                i = self._best(profile, pool, counts)
            if i is not None:
                return _placement(self._slots[i], profile)
        # Models with the same profiles get the same answer until something is placed.
        key = tuple((p.name, _static_key(p)) for p in model.profiles)
        nowhere = self._nowhere.get(key)
        if nowhere is None:
            nowhere = self._nowhere[key] = self._unschedulable(model)
        return nowhere

    def take(self, model: str, placement: Placement) -> None:
        """Record that a replica of `model` now holds its profile's share on the node."""
        i = self._index[placement.node_id]
        slot = self._slots[i]
        p = placement.profile
        slot.hold(p.cpu_cores, p.min_memory_gb)
        slot.devices.hold(placement.devices, *need_of(p))
        slot.resort()
        self._nowhere.clear()
        per_node = self._counts.setdefault(model, {})
        per_node[i] = per_node.get(i, 0) + 1

    def release(self, replica: Replica) -> None:
        """Record that `replica` stops in this plan: what it held on its node is free again."""
        i = self._index.get(replica.node_id or "", -1)
        if i < 0:
            return
        slot = self._slots[i]
        slot.cores += replica.cpu_cores
        slot.memory = round(slot.memory + replica.memory_gb, 3)
        slot.devices.release(self._devices_of(replica), *need_of(self._profile(replica)))
        slot.resort()
        self._nowhere.clear()
        per_node = self._counts.get(replica.model, {})
        if per_node.get(i):
            per_node[i] -= 1

    def open_nodes(self) -> list[str]:
        """The nodes that take new replicas at all (reporting, not cordoned or draining)."""
        return [s.node.id for s in self._slots if s.why is None]

    def reserved(self, node_id: str) -> bool:
        """Whether `node_id` carries the judge machine's labels (others go there last)."""
        return self._index.get(node_id, -1) in self._reserved

    def fits_without(self, model: Model, node_id: str, gone: Iterable[Replica]) -> Placement | None:
        """Where a replica of `model` would go on `node_id` alone were the replicas `gone` (on
        that node) stopped: the node's filters, then what fits, profile by profile; None when no
        profile fits there even then. Changes nothing."""
        i = self._index.get(node_id, -1)
        if i < 0 or self._slots[i].why is not None:
            return None
        slot = self._slots[i]
        cores, memory, devices = slot.cores, slot.memory, slot.devices.copy()
        for r in gone:
            cores += r.cpu_cores
            memory = round(memory + r.memory_gb, 3)
            devices.release(self._devices_of(r), *need_of(self._profile(r)))
        for p in model.profiles:
            if lacks(p, slot.node) is None and _short(p, slot.node, cores, memory,
                                                      devices) is None:
                return Placement(node_id, p, *_chosen(devices, p))
        return None

    def explain(self, model: Model) -> list[Verdict]:
        """For every profile and every node, in order: fits (reason None) or why not."""
        verdicts = []
        for p in model.profiles:
            for s, static in zip(self._slots, self._static(p), strict=True):
                why = static or _short(p, s.node, s.cores, s.memory, s.devices)
                verdicts.append(Verdict(p.name, s.node.id, why.reason if why else None))
        return verdicts

    def _profile(self, replica: Replica) -> Profile | None:
        return self._profiles.get((replica.model, replica.profile or ""))

    def _devices_of(self, replica: Replica) -> tuple[str, ...]:
        return self._held.get(replica.id, tuple(replica.devices))

    def _pool(self, profile: Profile) -> list[_Entry]:
        key: _PoolKey = (
            tuple(sorted(profile.node_selector.items())),
            profile.gpu_class if profile.gpu else None,
            profile.gpu,
        )
        pool = self._pools.get(key)
        if pool is None:
            pool = []
            for slot in self._slots:
                if slot.why is None and _admits(profile, slot.node):
                    pool.append(slot.entry)
                    slot.pools.append(pool)
            pool.sort()
            self._pools[key] = pool
        return pool

    def _best(
        self, profile: Profile, pool: list[_Entry], counts: dict[int, int],
        avoid: frozenset[int] = frozenset(),
    ) -> int | None:
        """The index of the best node of `pool` (but those in `avoid`) for `profile`, or None
        when none fits."""
        need_cores = profile.cpu_cores
        best: int | None = None
        fewest = -1
        # Entries before `start` have too little memory free; the rest come fullest first,
        # so the first fitting node without a replica of this model is the answer.
        start = bisect_left(pool, (profile.min_memory_gb,))
        for _, cores, _, i in islice(pool, start, None):
            if i in avoid:
                continue
            if need_cores and cores < need_cores:
                continue
            if profile.gpu and self._slots[i].devices.choose(profile) is None:
                continue
            here = counts.get(i, 0)
            if here == 0:
                return i
            if best is None or here < fewest:
                best, fewest = i, here
        return best

    def _static(self, profile: Profile) -> list[Why | None]:
        """Each node's reason for never taking `profile` in this plan, in node order."""
        key = _static_key(profile)
        static = self._lacks.get(key)
        if static is None:
            static = [s.why or lacks(profile, s.node) for s in self._slots]
            self._lacks[key] = static
        return static

    def _unschedulable(self, model: Model) -> Unschedulable:
        found: list[tuple[Profile, list[_Item]]] = []
        parts: list[str] = []
        nodes = [s.node for s in self._slots]
        for p in model.profiles:
            items: list[_Item] = []
            # Node indexes by the node-less phrase of their reason, for the summary.
            groups: dict[str, list[int]] = {}
            phrases = {k: short_group(p, k) for k in (GPUS, CORES, MEMORY)}
            for i, (s, why) in enumerate(zip(self._slots, self._static(p), strict=True)):
                if why is None:
                    gpus = s.devices.free(p.gpu_share) if p.gpu else _NO_GPUS
                    kind = shortfall(p, s.cores, s.memory, gpus)
                    # The profile fits nowhere, so with enough of everything counted, this
                    # node's devices do not fit it.
                    on_devices = None if kind else s.devices.why_not(p, s.node.id)
                    items.append((s.cores, s.memory, gpus, kind, on_devices))
                    group = on_devices.group if on_devices else phrases[kind]
                    groups.setdefault(group, []).append(i)
                else:
                    items.append(why)
                    groups.setdefault(why.group, []).append(i)
            found.append((p, items))
            parts.append(f"profile {p.name}: {summarize(p, nodes, items, groups)}")
        if self.reporting == 0:
            summary = (f"no node is available (none has reported in the last "
                       f"{int(self.node_timeout.total_seconds())}s)")
        else:
            summary = bounded("does not fit: " + " | ".join(parts))
        return Unschedulable(summary, nodes, found)


_NO_GPUS: Mapping[str, int] = {}


def _chosen(devices: Devices, profile: Profile) -> tuple[str | None, tuple[str, ...]]:
    """The GPU class and devices a replica of `profile` takes from `devices` (none for a CPU
    profile); only asked where the profile fits."""
    if not profile.gpu:
        return None, ()
    chosen = devices.choose(profile)
    assert chosen is not None, "devices are only chosen where the profile fits"
    return chosen


def _placement(slot: _Slot, profile: Profile) -> Placement:
    return Placement(slot.node.id, profile, *_chosen(slot.devices, profile))


def _short(
    profile: Profile, node: Node, cores: int, memory_gb: float, devices: Devices
) -> Why | None:
    """What `node` has too little of for `profile`: GPUs, cores, memory, then room on devices."""
    if not profile.gpu:
        return short(profile, node, cores, memory_gb, _NO_GPUS)
    why = short(profile, node, cores, memory_gb, devices.free(profile.gpu_share))
    if why is None and devices.choose(profile) is None:
        return devices.why_not(profile, node.id)
    return why


def _render(profile: Profile, node: Node, item: _Item) -> Why:
    if isinstance(item, Why):
        return item
    cores, memory, gpus, _, on_devices = item
    why = on_devices or short(profile, node, cores, memory, gpus)
    assert why is not None, "a snapshot is only taken of a node that is short of something"
    return why


def _static_key(profile: Profile) -> _StaticKey:
    """What decides where a profile goes, without its name or args."""
    return (tuple(sorted(profile.node_selector.items())), profile.gpu_class, profile.gpu,
            profile.cpu_cores, profile.min_memory_gb, profile.gpu_share, profile.gpu_memory_gb)


def _admits(profile: Profile, node: Node) -> bool:
    """Whether `node` passes `profile`'s selector and has its GPUs at all (free or not)."""
    labels = node.labels
    for key, want in profile.node_selector.items():
        if labels.get(key) != want:
            return False
    if profile.gpu:
        cls = profile.gpu_class
        total = node.gpus.get(cls, 0) if cls else max(node.gpus.values(), default=0)
        return total >= profile.gpu
    return True


def summarize(
    profile: Profile, nodes: list[Node], items: list[_Item], groups: dict[str, list[int]]
) -> str:
    """One profile's reasons in a line: a few nodes are named, many with one reason counted."""
    # Each part with how many nodes it speaks for.
    parts: list[tuple[str, int]] = []
    for group, members in groups.items():
        if len(members) > NAME_UP_TO:
            parts.append((f"{len(members)} nodes {group}", len(members)))
        else:
            parts += [(_render(profile, nodes[i], items[i]).terse, 1) for i in members]
    if len(parts) > PARTS_PER_PROFILE:
        shown = parts[:PARTS_PER_PROFILE]
        rest = len(items) - sum(n for _, n in shown)
        parts = [*shown, (f"{rest} more nodes for other reasons", rest)]
    return "; ".join(text for text, _ in parts) if parts else "no nodes"


def bounded(text: str, limit: int = SUMMARY_MAX) -> str:
    """`text`, cut to `limit` characters with an ellipsis when longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def schedule(
    model: Model,
    nodes: Iterable[Node],
    replicas: Iterable[Replica],
    now: datetime,
    node_timeout: timedelta = NODE_TIMEOUT,
    models: Iterable[Model] = (),
) -> Decision:
    """Where one more replica of `model` goes on these nodes, given these replicas (and the
    catalog `models`, for what they hold on their devices)."""
    return Cluster(nodes, replicas, now, node_timeout, models=models).schedule(model)


def explain(
    model: Model,
    nodes: Iterable[Node],
    replicas: Iterable[Replica],
    now: datetime,
    node_timeout: timedelta = NODE_TIMEOUT,
    models: Iterable[Model] = (),
) -> list[Verdict]:
    """For every profile of `model` and every node: whether one more replica fits, or why not."""
    return Cluster(nodes, replicas, now, node_timeout, models=models).explain(model)
