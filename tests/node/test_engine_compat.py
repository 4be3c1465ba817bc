"""The engine record: what this host needs to run a binary, per binary and CPU, across restarts."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from llmgw.node.engine_compat import EngineCompat, cpu_fingerprint

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
AMX_CPU = "model name : Intel(R) Xeon(R)\nflags : fpu avx2 avx512f amx_tile amx_int8\n"
AMD_CPU = "model name : AMD EPYC 9B14\nflags : fpu avx2 avx512f\n"


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    """A stand-in engine binary (only its path, size and mtime matter here)."""
    path = tmp_path / "llama-server"
    path.write_bytes(b"\x7fELF build 1")
    return path


def test_a_learned_flag_is_added_from_then_on_and_survives_a_restart(tmp_path: Path, binary: Path) -> None:
    record = tmp_path / "engine-compat.json"
    compat = EngineCompat(record, cpu="c1")
    assert compat.extra_args(str(binary)) == []

    assert compat.learn(str(binary), ["--no-repack"], "SIGILL", NOW) is True
    assert compat.learn(str(binary), ["--no-repack"], "SIGILL", NOW) is False  # once is enough
    assert compat.extra_args(str(binary)) == ["--no-repack"]
    assert EngineCompat(record, cpu="c1").extra_args(str(binary)) == ["--no-repack"]


def test_another_cpu_or_a_rebuilt_binary_is_tried_afresh(tmp_path: Path, binary: Path) -> None:
    record = tmp_path / "engine-compat.json"
    EngineCompat(record, cpu="c1").learn(str(binary), ["--no-repack"], "SIGILL", NOW)

    assert EngineCompat(record, cpu="c2").extra_args(str(binary)) == []
    binary.write_bytes(b"\x7fELF build 2, another size")
    os.utime(binary, ns=(1, 1))
    assert EngineCompat(record, cpu="c1").extra_args(str(binary)) == []


def test_a_damaged_record_is_ignored_not_fatal(tmp_path: Path, binary: Path) -> None:
    record = tmp_path / "engine-compat.json"
    record.write_text("{not json")
    compat = EngineCompat(record, cpu="c1")
    assert compat.extra_args(str(binary)) == []
    compat.learn(str(binary), ["--no-repack"], "SIGILL", NOW)
    assert EngineCompat(record, cpu="c1").extra_args(str(binary)) == ["--no-repack"]


def test_the_cpu_fingerprint_follows_model_and_flags_not_their_order() -> None:
    shuffled = "model name : Intel(R) Xeon(R)\nflags : amx_int8 amx_tile avx512f avx2 fpu\n"
    assert cpu_fingerprint(AMX_CPU) == cpu_fingerprint(shuffled)
    assert cpu_fingerprint(AMX_CPU) != cpu_fingerprint(AMD_CPU)
