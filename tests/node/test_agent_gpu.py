"""The node agent starting replicas placed on GPUs: the engine sees its devices and offloads to
them, and a llama-server that cannot is a failure in words, never a silent CPU run."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from llmgw.core.types import ReplicaState
from llmgw.engines import llamacpp
from llmgw.engines.crashes import NO_CUDA
from llmgw.node.agent import Assignment
from llmgw.server.init import demo_model_path
from tests.factories import gpu_device, gpu_profile, local_model, replica_placed
from tests.fakes.processes import FAKE_ENGINE
from tests.node.conftest import Reports, agent_for

PAIR = [gpu_device(0, "a100", 40.0), gpu_device(1, "a100", 80.0)]
UUIDS = [g.uuid for g in PAIR]


def on_gpus(path: str = "/models/m.gguf", gpu: int = 2) -> Assignment:
    model = local_model("m", path=path,
                        profiles=[gpu_profile(gpu=gpu, gpu_class="a100", cpu_cores=8)])
    return Assignment(replica_placed("rep-gpu", "m", profile="gpu", gpus=gpu, gpu_class="a100",
                                     devices=UUIDS[:gpu]), model)


def recording_engine(tmp_path: Path) -> tuple[str, Path]:
    """The fake engine behind a script that writes down the GPUs it was given and its argv."""
    seen = tmp_path / "seen.txt"
    path = tmp_path / "llama-server"
    path.write_text(f'#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES|$*" >> {seen}\n'
                    f'exec {sys.executable} {FAKE_ENGINE} --mode ok "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path), seen


async def test_a_replica_on_two_gpus_sees_them_and_splits_its_layers_by_their_memory(
    tmp_path: Path, reports: Reports
) -> None:
    binary, seen = recording_engine(tmp_path)
    agent = agent_for(tmp_path, binary, reports, [on_gpus()], devices=lambda: PAIR)
    try:
        await agent.reconcile()
        await reports.until(lambda s: s.state == ReplicaState.READY, "ready")
    finally:
        await agent.stop_all()

    started = [line for line in seen.read_text().splitlines() if "--model" in line]
    [(visible, argv)] = [line.split("|", 1) for line in started]
    assert visible == ",".join(UUIDS)
    assert (f"--n-gpu-layers {llamacpp.ALL_LAYERS} --split-mode layer --tensor-split 40,80 "
            f"--threads {llamacpp.GPU_THREADS}") in argv


async def test_the_cpu_only_llama_server_fails_a_gpu_replica_in_words_before_it_starts(
    tmp_path: Path, reports: Reports
) -> None:
    agent = agent_for(tmp_path, llamacpp.find_binary(), reports, [on_gpus(gpu=1)])
    try:
        await agent.reconcile()
        failed = await reports.until(lambda s: s.state == ReplicaState.FAILED, "failed")
    finally:
        await agent.stop_all()

    assert failed.last_error == NO_CUDA
    assert not (tmp_path / "logs" / "rep-gpu.log").exists()  # nothing ran on the CPU meanwhile


@pytest.mark.e2e
async def test_a_llama_server_that_finds_no_gpu_is_stopped_and_said_to_lack_cuda(
    tmp_path: Path, reports: Reports
) -> None:
    # An older build that cannot list its devices: only its log can tell it runs on the CPU.
    real = llamacpp.find_binary()
    binary = tmp_path / "llama-server"
    binary.write_text('#!/bin/sh\n[ "$1" = --list-devices ] && { echo "error: invalid argument: '
                      f'--list-devices" >&2; exit 1; }}\nexec {real} "$@"\n')
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    model = demo_model_path(tmp_path / "models")
    agent = agent_for(tmp_path, str(binary), reports, [on_gpus(str(model), gpu=1)],
                      max_failures=1)
    try:
        await agent.reconcile()
        failed = await reports.until(lambda s: s.state == ReplicaState.FAILED, "failed")
    finally:
        await agent.stop_all()

    assert NO_CUDA in (failed.last_error or "")
    assert ReplicaState.READY not in [s.state for s in reports.seen]
    assert "no usable GPU found" in (tmp_path / "logs" / "rep-gpu.log").read_text()
