"""A node's GPUs one by one, as placement sees them (pure): which devices a replica takes, what
each holds, and why none will do.

A replica with `gpu = N` takes N devices of one class. A device held by a replica whose profile
does not share (`gpu_share` false) takes nothing more; devices held only by sharing replicas take
more sharing replicas while their memory lasts. What a replica needs is its profile's
`gpu_memory_gb` (serving a GGUF sizes it), split across its devices in proportion to their
memory, as llama-server's `--tensor-split` splits the model.

A device's memory left is the smaller of its total minus what the replicas placed on it need and
its free memory at the node's last report: the first counts replicas that have not loaded yet,
the second what runs there outside llmgw, and a loaded replica is never counted twice. A declared
device (`--gpu CLASS=COUNT`, memory unknown) fits by count alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from llmgw.control.placement import Why
from llmgw.core.types import Gpu, Node, Profile


def declared(gpus: Mapping[str, int]) -> list[Gpu]:
    """The devices of a node that only counts its GPUs by class (`--gpu CLASS=COUNT`): N of each
    class, memory unknown, named "CLASS-N" as a declared GPU is."""
    found: list[Gpu] = []
    for cls, count in sorted(gpus.items()):
        found += [Gpu(index=len(found), uuid=f"{cls}-{n}", gpu_class=cls) for n in range(count)]
    return found


def split(need_gb: float, gpus: Sequence[Gpu]) -> list[float]:
    """`need_gb` across `gpus` in proportion to their memory (evenly when one's is unknown)."""
    weights = [g.memory_gb for g in gpus]
    if not all(weights):
        weights = [1.0] * len(gpus)
    total = sum(weights)
    return [round(need_gb * w / total, 3) for w in weights]


def need_of(profile: Profile | None) -> tuple[float, bool]:
    """What a replica of `profile` needs on its devices, GB (0: not known), and whether it shares
    them. A replica whose profile is gone holds its devices alone."""
    if profile is None:
        return 0.0, False
    return profile.gpu_memory_gb or 0.0, profile.gpu_share


@dataclass(slots=True)
class _Device:
    gpu: Gpu
    held_gb: float = 0.0
    holders: int = 0
    alone: bool = False  # held by a replica that does not share

    def left_gb(self) -> float:
        if self.gpu.declared:
            return math.inf
        left = self.gpu.memory_gb - self.held_gb
        if self.gpu.free_gb is not None:
            left = min(left, self.gpu.free_gb)
        return max(round(left, 3), 0.0)

    def open_to(self, share: bool) -> bool:
        return not self.alone and (self.holders == 0 or share)

    def takes(self, share_gb: float) -> bool:
        left = self.left_gb()
        return left > 0 and share_gb <= left


class Devices:
    """A node's GPUs and what the replicas of one plan hold on them."""

    __slots__ = ("_devices", "_by_uuid")

    def __init__(self, node: Node) -> None:
        gpus = node.devices or declared(node.gpus)
        self._devices = [_Device(g) for g in sorted(gpus, key=lambda g: g.index)]
        self._by_uuid = {d.gpu.uuid: d for d in self._devices}

    def copy(self) -> Devices:
        """An independent copy, to try changes on."""
        other = Devices.__new__(Devices)
        other._devices = [replace(d) for d in self._devices]
        other._by_uuid = {d.gpu.uuid: d for d in other._devices}
        return other

    def free(self, share: bool) -> dict[str, int]:
        """Per class, the devices a replica that does (not) share could still be given."""
        counts: dict[str, int] = {}
        for d in self._devices:
            counts.setdefault(d.gpu.gpu_class, 0)
            counts[d.gpu.gpu_class] += d.open_to(share)
        return counts

    def hold(self, uuids: Iterable[str], need_gb: float, share: bool) -> None:
        """Record a replica on `uuids` (those the node has) needing `need_gb` across them."""
        self._change(uuids, need_gb, share, 1)

    def release(self, uuids: Iterable[str], need_gb: float, share: bool) -> None:
        """Undo `hold` with the same arguments."""
        self._change(uuids, need_gb, share, -1)

    def hold_placed(
        self, uuids: Sequence[str], gpu_class: str | None, count: int, need_gb: float,
        share: bool,
    ) -> tuple[str, ...]:
        """Record a replica already placed; one placed before devices were tracked (`count` GPUs
        and no devices) holds the first free devices of its class. Returns what it holds."""
        if not uuids and count:
            open_ = [d.gpu.uuid for d in self._devices
                     if d.open_to(False) and d.gpu.gpu_class == gpu_class]
            uuids = open_[:count]
        held = tuple(uuids)
        self.hold(held, need_gb, share)
        return held

    def choose(self, profile: Profile) -> tuple[str, tuple[str, ...]] | None:
        """The class and the devices (UUIDs, by index) one more replica of `profile` takes, or
        None when no `profile.gpu` devices of one class fit it. Of the devices that fit, one
        replica takes the fullest (so a larger device stays for a larger model); a replica
        spread over several takes those with the most memory left."""
        need, share = need_of(profile)
        for cls in self._classes(profile):
            open_ = [d for d in self._devices if d.gpu.gpu_class == cls and d.open_to(share)]
            if len(open_) < profile.gpu:
                continue
            if profile.gpu == 1:
                fitting = [d for d in open_ if d.takes(need)]
                if fitting:
                    best = min(fitting, key=lambda d: (d.left_gb(), d.gpu.index))
                    return cls, (best.gpu.uuid,)
                continue
            most = sorted(open_, key=lambda d: (-d.left_gb(), d.gpu.index))[: profile.gpu]
            shares = split(need, [d.gpu for d in most])
            if all(d.takes(s) for d, s in zip(most, shares, strict=True)):
                return cls, tuple(d.gpu.uuid for d in sorted(most, key=lambda d: d.gpu.index))
        return None

    def why_not(self, profile: Profile, node_id: str) -> Why:
        """Why `choose` finds nothing on node `node_id` though it has enough devices open."""
        need, share = need_of(profile)
        classes = set(self._classes(profile))
        lefts = sorted((d.left_gb() for d in self._devices
                        if d.gpu.gpu_class in classes and d.open_to(share)), reverse=True)
        n = profile.gpu
        what = f"{need:.1f} GB" if need else "memory"
        if n == 1:
            largest = f"{lefts[0]:.1f} GB" if lefts else "none"
            return Why(f"needs {what} on one device; largest free {largest} on node {node_id}",
                       f"have no device with {what} free",
                       f"needs {what} on one device; node {node_id} has none with that free")
        most = " + ".join(f"{x:.1f}" for x in lefts[:n])
        return Why(f"needs {what} across {n} devices; most free {most} GB on node {node_id}",
                   f"have no {n} devices with {what} free between them",
                   f"needs {what} across {n} devices; node {node_id} has too little free")

    def _classes(self, profile: Profile) -> list[str]:
        if profile.gpu_class:
            return [profile.gpu_class]
        return sorted({d.gpu.gpu_class for d in self._devices})

    def _change(self, uuids: Iterable[str], need_gb: float, share: bool, sign: int) -> None:
        devices = [self._by_uuid[u] for u in uuids if u in self._by_uuid]
        for d, part in zip(devices, split(need_gb, [d.gpu for d in devices]), strict=True):
            d.holders += sign
            d.held_gb = round(d.held_gb + sign * part, 3)
            if not share:
                d.alone = sign > 0
