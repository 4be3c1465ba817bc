"""This machine's GPUs: NVIDIA's found through NVML (`node.nvml`), named by class, renamed and
hidden as the node's options say, or declared by hand (`--gpu CLASS=COUNT`).

A machine without NVIDIA's driver (or without `nvidia-ml-py`) is a CPU node: said once in the
log, never an error. AMD GPUs are not found (a stated gap).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from llmgw.core.types import Gpu
from llmgw.node import nvml

logger = logging.getLogger(__name__)

# Words of a GPU's name that say nothing about what it can hold or run: the vendor and brand,
# the board's form factor and its memory's kind.
_DROPPED = frozenset({"nvidia", "geforce", "tesla", "quadro", "pcie", "sxm", "sxm2", "sxm3", "sxm4",
                      "sxm5", "hbm2", "hbm2e", "hbm3", "hbm3e"})
_MEMORY = re.compile(r"^\d+gb$")


def gpu_class(name: str) -> str:
    """The class of a GPU named `name` by its driver: lower case, without the vendor's words,
    with its memory when the name has it (`NVIDIA A100-SXM4-80GB` → `a100-80gb`)."""
    words = [w for w in re.split(r"[\s_/-]+", name.lower()) if w and w not in _DROPPED]
    memory = [w for w in words if _MEMORY.match(w)]
    model = [re.sub(r"[^a-z0-9.]", "", w) for w in words if not _MEMORY.match(w)]
    return "-".join(w for w in [*model, *memory[:1]] if w)[:64] or "gpu"


def declared(gpus: Mapping[str, int]) -> list[Gpu]:
    """The devices `--gpu CLASS=COUNT` declares: their class only (memory unknown), each with
    the UUID `CLASS-N`."""
    each = [(cls, n) for cls, count in sorted(gpus.items()) for n in range(count)]
    return [Gpu(index=i, uuid=f"{cls}-{n}", gpu_class=cls) for i, (cls, n) in enumerate(each)]


def counts(devices: Iterable[Gpu]) -> dict[str, int]:
    """A node's GPUs counted by class (`Node.gpus`)."""
    out: dict[str, int] = {}
    for d in devices:
        out[d.gpu_class] = out.get(d.gpu_class, 0) + 1
    return out


@dataclass(frozen=True)
class GpuRules:
    """What a node's options say of its GPUs: `rename` maps a found class to the class the node
    offers it as (`a100-80gb` → `a100`); `hide` names GPUs, by index or UUID, it never offers."""

    rename: Mapping[str, str] = field(default_factory=dict)
    hide: frozenset[str] = frozenset()

    def offered(self, gpu: Gpu) -> Gpu | None:
        """`gpu` as the node offers it, or None when it is hidden."""
        if str(gpu.index) in self.hide or gpu.uuid in self.hide:
            return None
        renamed = self.rename.get(gpu.gpu_class)
        return gpu.model_copy(update={"gpu_class": renamed}) if renamed else gpu


@dataclass(frozen=True)
class Inventory:
    """What a look at this machine's GPUs found: the GPUs it offers, NVIDIA's driver and CUDA
    versions (None on a CPU node), and why NVML found none, when it did not start."""

    gpus: tuple[Gpu, ...] = ()
    driver: str | None = None
    cuda: str | None = None
    no_nvml: str | None = None


class GpuFinder:
    """Looks at this machine's NVIDIA GPUs each time it is asked (a node's every report): one
    per process, so that what is said once is said once.

    `lib` is NVML's binding: pynvml (`GpuFinder.here`), a recorded one in tests, None for a
    machine without it."""

    def __init__(self, lib: nvml.Library | None, rules: GpuRules | None = None) -> None:
        self.rules = rules or GpuRules()
        self._lib = lib
        self._nvml: nvml.Nvml | None = None
        self._started: nvml.Started | None = None
        self._cpu_reason: str | None = None  # why this is a CPU node, said once
        # GPUs that could not be read, by index: each is said once, until it answers again.
        self._lost: set[int] = set()
        self._known: dict[int, str] = {}  # index → "UUID, name", as last read
        self._uncounted = False

    @classmethod
    def here(cls, rules: GpuRules | None = None) -> GpuFinder:
        """A finder of this machine's GPUs through pynvml, where `nvidia-ml-py` is installed."""
        return cls(nvml.load(), rules)

    def look(self) -> Inventory:
        """The GPUs this machine offers now, with their memory, utilisation and temperature."""
        found = self._start()
        if found is None or self._nvml is None:
            return Inventory(no_nvml=self._cpu_reason)
        count = self._nvml.count()
        if isinstance(count, str):
            if not self._uncounted:
                logger.warning("NVML could not count the GPUs (%s): reports have none until it "
                               "can", count)
            self._uncounted = True
            return Inventory(driver=found.driver, cuda=found.cuda)
        self._uncounted = False
        gpus: list[Gpu] = []
        for index in range(count):
            reading = self._nvml.read(index)
            if isinstance(reading, nvml.Unreadable):
                self._unreadable(reading)
                continue
            if index in self._lost:
                self._lost.discard(index)
                logger.info("GPU %d (%s) answers again: it is offered again", index, reading.uuid)
            self._known[index] = f"{reading.uuid}, {reading.name}"
            offered = self.rules.offered(_gpu(reading))
            if offered is not None:
                gpus.append(offered)
        return Inventory(tuple(gpus), found.driver, found.cuda)

    def _start(self) -> nvml.Started | None:
        if self._started is not None or self._cpu_reason is not None:
            return self._started
        if self._lib is None:
            self._cpu("nvidia-ml-py is not installed")
            return None
        self._nvml = nvml.Nvml(self._lib)
        started = self._nvml.start()
        if isinstance(started, str):
            self._cpu(f"NVIDIA's management library did not start: {started}")
            return None
        self._started = started
        logger.info("NVIDIA driver %s (CUDA %s): GPUs are found through NVML",
                    started.driver or "of unknown version", started.cuda or "unknown")
        return started

    def _cpu(self, why: str) -> None:
        self._cpu_reason = why
        logger.info("no NVIDIA GPU found (%s): this is a CPU node", why)

    def _unreadable(self, reading: nvml.Unreadable) -> None:
        if reading.index in self._lost:
            return
        self._lost.add(reading.index)
        what = self._known.get(reading.index, "never read")
        if reading.lost:
            logger.warning("GPU %d (%s) is lost (%s): it is dropped from this node's report "
                           "until it answers again", reading.index, what, reading.reason)
        else:
            logger.warning("GPU %d (%s) cannot be read (%s): it is left out of this node's "
                           "report", reading.index, what, reading.reason)


def _gpu(r: nvml.Reading) -> Gpu:
    return Gpu(
        index=r.index, uuid=r.uuid, name=r.name[:128], gpu_class=gpu_class(r.name),
        memory_gb=_gib(r.memory_total), free_gb=_gib(r.memory_free),
        memory_used_gb=_gib(r.memory_used), compute_capability=r.compute_capability,
        utilization=min(max(r.utilization_pct, 0), 100) / 100 if r.utilization_pct is not None
        else None,
        temperature_c=r.temperature_c,
    )


def _gib(n: int) -> float:
    return round(max(n, 0) / 2**30, 3)
