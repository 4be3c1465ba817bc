"""`llmgw doctor`: each start-up check says what it found, and the engine probe learns the
remedy for an engine that dies of SIGILL."""

from __future__ import annotations

import stat
import sys
from datetime import UTC, datetime
from pathlib import Path

from llmgw.core.settings import load
from llmgw.server.doctor import Check, Doctor, Verdict
from llmgw.server.init import init
from llmgw.store.store import Store
from tests.factories import local_model
from tests.fakes.processes import FAKE_ENGINE


def engine(tmp_path: Path, *fake_args: str) -> str:
    """A llama-server stand-in running the fake engine (which answers chat requests)."""
    path = tmp_path / "llama-server"
    path.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'version: 9999 (fake)'; exit 0; }}\n"
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
