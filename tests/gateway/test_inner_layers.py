"""The gateway's inner layers are kept by an import-linter contract (pyproject.toml): shown here
to break when a lower module imports a stage, or a stage imports another, on a copy of the code
with that one import added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_with(tmp_path: Path, module: str, added: str) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over a copy of `src/llmgw` where `module` also imports `added`."""
    shutil.copytree(ROOT / "src" / "llmgw", tmp_path / "src" / "llmgw",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "static", "*.js", "*.css"))
    path = tmp_path / "src" / Path(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text() + f"\nimport {added}  # noqa\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("module", "added", "contract"), [
    # The layers below the stages never reach up to one.
    ("llmgw.gateway.call", "llmgw.gateway.stages.limits", "the gateway's inner layers point down"),
    ("llmgw.gateway.transport", "llmgw.gateway.stages.guard",
     "the gateway's inner layers point down"),
    ("llmgw.gateway.reach", "llmgw.gateway.relay", "the gateway's inner layers point down"),
    # A stage knows no other stage: each is composed by the service alone.
    ("llmgw.gateway.stages.cache", "llmgw.gateway.stages.guard",
     "the gateway's stages are independent of each other"),
])
def test_the_contract_breaks_when_an_import_runs_back_up(
    tmp_path: Path, module: str, added: str, contract: str
) -> None:
    result = lint_with(tmp_path, module, added)
    assert result.returncode != 0
    assert f"{contract} BROKEN" in result.stdout
    assert f"{module} -> {added}" in result.stdout
