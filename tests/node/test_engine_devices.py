"""Which GPUs an engine binary can offload to, from `llama-server --list-devices`: the real
CPU-only build in the venv, and recorded listings of GPU builds."""

from __future__ import annotations

import stat
from pathlib import Path

from llmgw.engines import llamacpp
from llmgw.engines.crashes import NO_CUDA
from llmgw.node import engine_devices

NVML = ["GPU-5f3c0a1e-7d2b-4c9a-9b1e-0c2d3e4f5a6b"]

# What a CUDA build printed on a machine with one H200 (stderr and stdout together).
CUDA_LISTING = """ggml_cuda_init: found 1 CUDA devices:
  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes
Available devices:
  CUDA0: NVIDIA H200 (143771 MiB, 143124 MiB free)
"""
METAL_LISTING = "Available devices:\n  MTL0: Apple M2 Pro (21845 MiB, 21845 MiB free)\n"


def lister(tmp_path: Path, output: str, code: int = 0) -> str:
    """A stand-in llama-server that prints `output` and exits with `code`."""
    path = tmp_path / "llama-server"
    (tmp_path / "out.txt").write_text(output)
    path.write_text(f"#!/bin/sh\ncat {tmp_path / 'out.txt'}\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_listing_is_read_device_by_device() -> None:
    assert engine_devices.parse(CUDA_LISTING) == ("CUDA0: NVIDIA H200 (143771 MiB, 143124 MiB free)",)
    assert engine_devices.parse("Available devices:\n  (none)\n") == ()


async def test_the_cpu_build_lists_no_device_and_cannot_run_a_replica_on_a_gpu() -> None:
    binary = llamacpp.find_binary()

    assert await engine_devices.listed(binary) == ()
    assert await engine_devices.cannot_offload(binary, NVML) == NO_CUDA
    assert await engine_devices.cannot_offload(binary, ["l4-0"]) == NO_CUDA


async def test_a_cuda_build_runs_replicas_on_nvidia_gpus(tmp_path: Path) -> None:
    assert await engine_devices.cannot_offload(lister(tmp_path, CUDA_LISTING), NVML) is None


async def test_a_gpu_build_without_cuda_runs_declared_gpus_but_not_nvidia_ones(tmp_path: Path) -> None:
    binary = lister(tmp_path, METAL_LISTING)

    assert await engine_devices.cannot_offload(binary, ["m2-0"]) is None
    assert await engine_devices.cannot_offload(binary, NVML) == NO_CUDA


async def test_a_build_that_cannot_list_its_devices_is_left_to_its_log(tmp_path: Path) -> None:
    binary = lister(tmp_path, "error: invalid argument: --list-devices\n", code=1)

    assert await engine_devices.cannot_offload(binary, NVML) is None
