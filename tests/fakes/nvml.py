"""NVML as pynvml answers it, from recorded answers of real GPUs: what `llmgw.node.nvml` is
handed in place of pynvml where no NVIDIA GPU is (every CI machine).

The recordings are what nvidia-ml-py answers on those boards (names, memory in bytes, compute
capability; the driver 550.54.15 with CUDA 12.4). `FakeNvml` answers like the pynvml module:
the same function names, the same `NVMLError` with NVML's error number in `value`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

MIB = 2**20

# NVML's error numbers (nvml.h), and the messages pynvml gives them.
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_GPU_IS_LOST = 15
_MESSAGES = {ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded", ERROR_LIBRARY_NOT_FOUND:
             "NVML Shared Library Not Found", ERROR_GPU_IS_LOST: "GPU is lost"}


class NVMLError(Exception):
    """pynvml's exception: NVML's error number in `value`."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"Unknown Error {self.value}")


@dataclass(frozen=True)
class RecordedGpu:
    """One GPU as NVML answered for it."""

    name: str
    uuid: str
    total: int  # bytes
    free: int
    cc: tuple[int, int]
    utilization: int = 0  # %
    temperature: int = 30  # °C

    @property
    def used(self) -> int:
        return self.total - self.free


# One H200 (SXM, 141 GB of HBM3e; NVML counts 143155 MiB of it, 139.8 GiB), idle.
H200 = RecordedGpu("NVIDIA H200", "GPU-5c8a1e4b-3f1d-7a22-9b0e-2d4f6a8c0e11", 143155 * MIB,
                   142523 * MIB, (9, 0), utilization=0, temperature=31)
# Two A100s of different memory: the PCIe board with 40 GB, the SXM4 one with 80 GB.
A100_40GB = RecordedGpu("NVIDIA A100-PCIE-40GB", "GPU-0d3e6c1a-91b2-4c55-8e3f-6a7b8c9d0e1f",
                        40960 * MIB, 40333 * MIB, (8, 0), utilization=7, temperature=38)
A100_80GB = RecordedGpu("NVIDIA A100-SXM4-80GB", "GPU-7f2b9d40-5e6a-4b1c-a3d2-8e9f0a1b2c3d",
                        81920 * MIB, 81037 * MIB, (8, 0), utilization=63, temperature=54)
# A full device: another process holds all of its memory (free 0), busy.
FULL_4090 = RecordedGpu("NVIDIA GeForce RTX 4090", "GPU-a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d",
                        24564 * MIB, 0, (8, 9), utilization=100, temperature=83)


class FakeNvml:
    """Answers like the pynvml module for `gpus` (index = position); `init_error` makes
    nvmlInit raise that NVML error (no driver). `lose(index)` makes that GPU answer
    GPU_IS_LOST from then on, as a GPU that fell off the bus does."""

    NVMLError = NVMLError

    def __init__(self, gpus: list[RecordedGpu], *, init_error: int | None = None,
                 driver: str = "550.54.15", cuda: int = 12040) -> None:
        self.gpus = list(gpus)
        self.init_error = init_error
        self.driver = driver
        self.cuda = cuda
        self.lost: set[int] = set()
        self.inits = 0

    def lose(self, index: int) -> None:
        self.lost.add(index)

    def set(self, index: int, **answers: Any) -> None:
        """Change what GPU `index` answers from now on (its load, its free memory)."""
        self.gpus[index] = replace(self.gpus[index], **answers)

    def _check(self) -> None:
        if self.inits == 0:
            raise NVMLError(1)  # NVML_ERROR_UNINITIALIZED

    def _gpu(self, handle: int) -> RecordedGpu:
        self._check()
        if handle in self.lost:
            raise NVMLError(ERROR_GPU_IS_LOST)
        return self.gpus[handle]

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.inits += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check()
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise NVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._gpu(handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self._gpu(handle)
        return SimpleNamespace(total=gpu.total, free=gpu.free, used=gpu.used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return self._gpu(handle).cc

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        gpu = self._gpu(handle)
        return SimpleNamespace(gpu=gpu.utilization, memory=gpu.utilization // 2)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == 0  # NVML_TEMPERATURE_GPU
        return self._gpu(handle).temperature
