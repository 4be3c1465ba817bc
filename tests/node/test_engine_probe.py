"""The GPU devices a llama-server build can use, as its `--list-devices` prints them."""

from __future__ import annotations

from pathlib import Path

from llmgw.engines import llamacpp
from llmgw.node.engine_probe import EngineDevice, list_devices, parse_devices

# As a CUDA build prints it on a machine with an H200 and an L4 (the CUDA init lines first).
CUDA_BUILD = """ggml_cuda_init: GGML_CUDA_FORCE_MMQ:    no
ggml_cuda_init: found 2 CUDA devices:
  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes
  Device 1: NVIDIA L4, compute capability 8.9, VMM: yes
Available devices:
  CUDA0: NVIDIA H200 (143156 MiB, 142523 MiB free)
  CUDA1: NVIDIA L4 (22478 MiB, 22101 MiB free)
"""


def test_a_cuda_build_lists_its_devices_with_their_memory() -> None:
    assert parse_devices(CUDA_BUILD) == [
        EngineDevice("CUDA0", "NVIDIA H200", 143156, 142523),
        EngineDevice("CUDA1", "NVIDIA L4", 22478, 22101),
    ]
    assert {d.backend for d in parse_devices(CUDA_BUILD)} == {"CUDA"}


def test_a_cpu_only_build_lists_none() -> None:
    assert parse_devices("Available devices:\n  (none)\n") == []


def test_the_real_llama_server_answers_the_listing() -> None:
    # This machine's build: CPU-only here, so it lists none; a CUDA build lists its GPUs.
    devices = list_devices(llamacpp.find_binary())
    assert isinstance(devices, list)
    assert all(d.backend for d in devices)


def test_a_binary_that_is_no_llama_server_says_so(tmp_path: Path) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexit 2\n")
    fake.chmod(0o755)
    assert list_devices(str(fake)) == f"{fake} --list-devices exited with code 2: is it llama-server?"
