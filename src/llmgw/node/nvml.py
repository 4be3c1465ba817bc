"""The NVML boundary: NVIDIA's management library through NVIDIA's own binding (`nvidia-ml-py`,
imported as `pynvml`), where it is installed.

What NVML answers crosses this module as plain data, and its errors as plain outcomes (a
library that does not start, a GPU that fell off the bus), never as pynvml's exceptions: the
rest of llmgw never imports pynvml. Tests hand `Nvml` a recorded library instead of pynvml.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

# NVML's error number (nvml.h) for a GPU that fell off the bus.
GPU_IS_LOST = 15
# NVML's `NVML_TEMPERATURE_GPU` sensor.
TEMPERATURE_GPU = 0


class Library(Protocol):
    """The part of pynvml llmgw calls (its names, as pynvml spells them)."""

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...


@dataclass(frozen=True)
class Reading:
    """One GPU as NVML read it just now; what NVML could not tell (not supported) is None."""

    index: int
    uuid: str
    name: str
    memory_total: int  # bytes
    memory_free: int
    memory_used: int
    compute_capability: str | None
    utilization_pct: int | None
    temperature_c: int | None


@dataclass(frozen=True)
class Unreadable:
    """A GPU NVML counts but could not read; `lost` when it fell off the bus (GPU_IS_LOST)."""

    index: int
    lost: bool
    reason: str


@dataclass(frozen=True)
class Started:
    """NVML started: the driver's version and the CUDA version it supports (`12.4`)."""

    driver: str | None
    cuda: str | None


def load() -> Library | None:
    """pynvml where `nvidia-ml-py` is installed; None where it is not."""
    try:
        module: Library = importlib.import_module("pynvml")
    except ImportError:
        return None
    return module


class Nvml:
    """Reads GPUs through `lib`; `start` first, once per process."""

    def __init__(self, lib: Library) -> None:
        self._lib = lib

    def start(self) -> Started | str:
        """Start NVML: what it says of the system, or why it cannot start (no driver)."""
        lib = self._lib
        try:
            lib.nvmlInit()
        except lib.NVMLError as exc:
            return _said(exc)
        except OSError as exc:  # the binding cannot load libnvidia-ml.so
            return str(exc)
        driver = self._optional(lib.nvmlSystemGetDriverVersion)
        cuda = self._optional(lib.nvmlSystemGetCudaDriverVersion)
        return Started(_text(driver) if driver is not None else None,
                       f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None)

    def count(self) -> int | str:
        """How many GPUs NVML counts, or why it cannot say."""
        try:
            return int(self._lib.nvmlDeviceGetCount())
        except self._lib.NVMLError as exc:
            return _said(exc)

    def read(self, index: int) -> Reading | Unreadable:
        """GPU `index` now: its identity, memory, utilisation and temperature."""
        lib = self._lib
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            name = _text(lib.nvmlDeviceGetName(handle))
            uuid = _text(lib.nvmlDeviceGetUUID(handle))
            memory = lib.nvmlDeviceGetMemoryInfo(handle)
            cc = self._optional(lib.nvmlDeviceGetCudaComputeCapability, handle)
            rates = self._optional(lib.nvmlDeviceGetUtilizationRates, handle)
            temperature = self._optional(lib.nvmlDeviceGetTemperature, handle, TEMPERATURE_GPU)
        except lib.NVMLError as exc:
            return Unreadable(index, getattr(exc, "value", None) == GPU_IS_LOST, _said(exc))
        return Reading(
            index=index, uuid=uuid, name=name, memory_total=int(memory.total),
            memory_free=int(memory.free), memory_used=int(memory.used),
            compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
            utilization_pct=int(rates.gpu) if rates is not None else None,
            temperature_c=int(temperature) if temperature is not None else None,
        )

    def _optional(self, call: Any, *args: Any) -> Any:
        """`call(*args)`, or None where this GPU or driver cannot answer it; a lost GPU still
        raises (the whole reading is void)."""
        try:
            return call(*args)
        except self._lib.NVMLError as exc:
            if getattr(exc, "value", None) == GPU_IS_LOST:
                raise
            return None


def _said(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _text(value: str | bytes) -> str:
    # Older bindings answer bytes.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
