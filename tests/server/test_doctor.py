"""`llmgw doctor`: each start-up check says what it found, and the engine probe learns the
remedy for an engine that dies of SIGILL."""

from __future__ import annotations

import stat
import sys
from datetime import UTC, datetime
from pathlib import Path

from llmgw.core.settings import load
from llmgw.node.gpus import GpuFinder
from llmgw.server.doctor import Check, Doctor, Verdict
from llmgw.server.init import init
from llmgw.store.store import Store
from tests.factories import local_model
from tests.fakes.nvml import A100_80GB, ERROR_DRIVER_NOT_LOADED, H200, FakeNvml
from tests.fakes.processes import FAKE_ENGINE

# What `llama-server --list-devices` prints: a CPU-only build, and a CUDA build on an H200.
CPU_BUILD = "Available devices:\n  (none)\n"
CUDA_BUILD = ("ggml_cuda_init: found 1 CUDA devices:\n"
              "  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes\n"
              "Available devices:\n  CUDA0: NVIDIA H200 (143156 MiB, 142523 MiB free)\n")


def engine(tmp_path: Path, *fake_args: str, devices: str = CPU_BUILD) -> str:
    """A llama-server stand-in running the fake engine (which answers chat requests); it lists
    `devices`, and writes each start's CUDA_VISIBLE_DEVICES and arguments to `starts`."""
    path = tmp_path / "llama-server"
    (tmp_path / "devices.txt").write_text(devices)
    path.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'version: 9999 (fake)'; exit 0; }}\n"
                    f"[ \"$1\" = --list-devices ] && {{ cat {tmp_path / 'devices.txt'}; exit 0; }}\n"
                    f"echo \"$CUDA_VISIBLE_DEVICES $*\" >> {tmp_path / 'starts'}\n"
                    f"exec {sys.executable} {FAKE_ENGINE} {' '.join(fake_args)} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def install_with_model(tmp_path: Path, model_file: Path | None) -> Path:
    """An initialised data dir whose catalog has one local model at `model_file`."""
    data = tmp_path / "data"
    init(data, port=0, guard=False)
    path = model_file or tmp_path / "absent.gguf"
    store = Store.open(load(data).database_url(data))
    try:
        store.catalog.add(local_model("tiny", path=str(path)), "test", datetime.now(UTC))
    finally:
        store.close()
    return data


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_a_healthy_install_passes_every_check(tmp_path: Path) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    data = install_with_model(tmp_path, gguf)

    checks = by_name(Doctor(data, find_binary=lambda: engine(tmp_path, "--mode", "ok")).run())

    assert {c.verdict for c in checks.values()} == {Verdict.OK}, checks
    assert "writable" in checks["data dir"].detail
    assert "1 model(s)" in checks["database"].detail
    assert "version: 9999 (fake)" in checks["engine binary"].detail
    assert str(gguf) in checks["model file: tiny"].detail
    assert "answered a chat request" in checks["engine probe (no extra args)"].detail
    assert checks["engine GPU backends"].detail == "none (a CPU-only build)"


def test_the_gpus_their_driver_and_the_engines_backends_are_listed_and_the_probe_runs_on_a_gpu(
    tmp_path: Path,
) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    data = install_with_model(tmp_path, gguf)
    binary = engine(tmp_path, "--mode", "ok", devices=CUDA_BUILD)

    checks = by_name(Doctor(data, find_binary=lambda: binary,
                            gpus=GpuFinder(FakeNvml([H200, A100_80GB]))).run())

    assert {c.verdict for c in checks.values()} == {Verdict.OK}, checks
    assert checks["NVIDIA driver"].detail == "550.54.15, CUDA 12.4"
    assert checks["GPU 0"].detail == (f"NVIDIA H200 as h200: 139.8 GB, 139.2 GB free, compute "
                                      f"capability 9.0, {H200.uuid}")
    assert checks["GPU 1"].detail.startswith("NVIDIA A100-SXM4-80GB as a100-80gb: 80.0 GB")
    assert checks["engine GPU backends"].detail == "CUDA0: NVIDIA H200"
    assert "answered a chat request" in checks["engine probe (GPU 0 h200, no extra args)"].detail
    # The probe ran with every layer on the first GPU, and that GPU alone visible.
    [start] = (tmp_path / "starts").read_text().splitlines()
    assert start.startswith(H200.uuid + " ") and "--n-gpu-layers 999" in start


def test_gpus_with_a_cpu_only_engine_are_a_warning_and_the_probe_runs_on_the_cpu(tmp_path: Path) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    data = install_with_model(tmp_path, gguf)
    binary = engine(tmp_path, "--mode", "ok")

    checks = by_name(Doctor(data, find_binary=lambda: binary, gpus=GpuFinder(FakeNvml([H200]))).run())

    backends = checks["engine GPU backends"]
    assert backends.verdict == Verdict.WARN
    assert "has no GPU backend (a CPU-only build): its replicas run on the CPU" in backends.detail
    assert checks["engine probe (no extra args)"].verdict == Verdict.OK
    [start] = (tmp_path / "starts").read_text().splitlines()
    assert "--n-gpu-layers" not in start


def test_a_machine_without_the_driver_says_it_is_a_cpu_node(tmp_path: Path) -> None:
    data = install_with_model(tmp_path, None)
    lib = FakeNvml([H200], init_error=ERROR_DRIVER_NOT_LOADED)

    checks = by_name(Doctor(data, probe=False, find_binary=lambda: engine(tmp_path),
                            gpus=GpuFinder(lib)).run())

    assert checks["GPUs"] == Check("GPUs", Verdict.OK, "none found (NVIDIA's management library did "
                                                       "not start: Driver Not Loaded): a CPU node")
    assert "NVIDIA driver" not in checks


def test_a_probe_that_dies_of_sigill_is_tried_with_no_repack_which_is_then_recorded(tmp_path: Path) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    data = install_with_model(tmp_path, gguf)
    binary = engine(tmp_path, "--mode", "crash", "--crash-signal", "ILL", "--crash-unless=--no-repack")

    checks = by_name(Doctor(data, find_binary=lambda: binary).run())

    first = checks["engine probe (no extra args)"]
    assert first.verdict == Verdict.WARN and "illegal instruction (SIGILL)" in first.detail
    assert checks["engine probe (--no-repack)"].verdict == Verdict.OK
    assert "--no-repack from now on" in checks["engine flags"].detail
    # A second run starts with the flag at once.
    again = by_name(Doctor(data, find_binary=lambda: binary).run())
    assert again["engine probe (--no-repack)"].verdict == Verdict.OK
    assert "engine probe (no extra args)" not in again


def test_an_engine_that_always_dies_fails_the_probe_with_the_diagnosis(tmp_path: Path) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    data = install_with_model(tmp_path, gguf)
    binary = engine(tmp_path, "--mode", "crash", "--crash-signal", "SEGV")

    checks = by_name(Doctor(data, find_binary=lambda: binary).run())

    probe = checks["engine probe (no extra args)"]
    assert probe.verdict == Verdict.FAIL and "segmentation fault" in probe.detail


def test_a_missing_model_file_and_a_missing_data_dir_are_failures_that_say_what_to_do(tmp_path: Path) -> None:
    data = install_with_model(tmp_path, None)
    checks = by_name(Doctor(data, probe=False, find_binary=lambda: engine(tmp_path)).run())
    assert checks["model file: tiny"].verdict == Verdict.FAIL
    assert "absent.gguf is missing" in checks["model file: tiny"].detail

    nothing = by_name(Doctor(tmp_path / "nowhere").run())
    assert nothing["data dir"].verdict == Verdict.FAIL and "llmgw server init" in nothing["data dir"].detail
    assert nothing["config"].verdict == Verdict.FAIL
