"""The suite never reads or writes the user's install, whatever the environment holds: a user who
runs `scripts/test.sh` in the shell where `scripts/up.sh` exported LLMGW_DATA_DIR (and has a
ctl.toml in HOME) keeps the install exactly as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llmgw.cli import ctl
from llmgw.cli.client import config_path
from llmgw.core.settings import default_data_dir
from tests.support.cluster import Cluster
from tests.support.isolation import INFRASTRUCTURE, suite_home
from tests.support.server_process import LlmgwServer, run_cli

ROOT = Path(__file__).resolve().parents[1]
CANARY_KEY = "sk-llmgw-canary-0123456789abcdefghijklmnopqrstuvwxyz"


def canary(root: Path) -> dict[str, str]:
    """A user's install under `root` and the environment that points at it: the values up.sh and
    the install page tell a user to export, HOME and XDG, and a ctl.toml naming a server."""
    ctl_toml = f'url = "http://127.0.0.1:1"\nkey = "{CANARY_KEY}"\n'
    for path, text in {
        "ctl.toml": ctl_toml,
        ".config/llmgw/ctl.toml": ctl_toml,
        "data/config.toml": "[server]\nport = 1\n",
        ".local/share/llmgw/config.toml": "[server]\nport = 1\n",
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return {
        "LLMGW_DATA_DIR": str(root / "data"), "LLMGW_PORT": "1", "LLMGW_ADMIN_KEY": CANARY_KEY,
        "LLMGW_URL": "http://127.0.0.1:1", "LLMGW_CTL_CONFIG": str(root / "ctl.toml"),
        "HOME": str(root), "XDG_CONFIG_HOME": str(root / ".config"),
        "XDG_DATA_HOME": str(root / ".local" / "share"), "HF_HOME": str(root / "hf"),
    }


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for a directory)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def test_a_server_helper_uses_its_own_dir_whatever_the_environment_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "users-install"
    for name, value in canary(root).items():
        monkeypatch.setenv(name, value)
    before = snapshot(root)

    # --save-ctl-config writes where HOME says: the suite's home, not the user's.
    server = LlmgwServer.init(tmp_path / "data", "--no-demo", "--no-guard", "--no-embedded-node",
                              "--save-ctl-config")
    server.start()
    try:
        assert server.port != 1
        server.ctl("model", "list")  # the test's own key, from the helper's environment
        # ctl with no key of the test's own finds none: not the user's variable nor their file.
        anonymous = run_cli("ctl", "--url", server.url, "model", "list",
                            env={"LLMGW_CTL_CONFIG": str(tmp_path / "none.toml")}, check=False)
        assert anonymous.returncode == 1 and "no admin key" in anonymous.stderr
    finally:
        server.stop()
    assert (tmp_path / "data" / "config.toml").is_file() and (tmp_path / "data" / "llmgw.db").is_file()
    saved = suite_home() / ".config" / "llmgw" / "ctl.toml"
    assert server.admin_key in saved.read_text()
    saved.unlink()  # the suite's home keeps no key for the next test's ctl to find
    assert snapshot(root) == before


def test_a_cluster_uses_its_own_dirs_whatever_the_environment_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Cluster.up hands its environment to `server init`, each server and the node agents.
    root = tmp_path / "users-install"
    for name, value in canary(root).items():
        monkeypatch.setenv(name, value)
    before = snapshot(root)
    (tmp_path / "cluster").mkdir()
    with Cluster.up(tmp_path / "cluster", f"sqlite:///{tmp_path / 'cluster.db'}", servers=1) as cluster:
        cluster.any_server().ctl("model", "list")
    assert (tmp_path / "cluster" / "server-1" / "config.toml").is_file()
    assert snapshot(root) == before


def test_the_suite_process_sees_none_of_the_users_install() -> None:
    assert not [k for k in os.environ if k.startswith(("LLMGW_", "HF_")) and k not in INFRASTRUCTURE]
    assert Path.home() == suite_home()
    assert default_data_dir().is_relative_to(suite_home())
    assert config_path().is_relative_to(suite_home())
    # The in-process CLI finds no key: not the user's variable, not their ctl.toml.
    result = CliRunner().invoke(ctl.app, ["model", "list"])
    assert result.exit_code == 1 and "no admin key" in result.stderr


def test_a_suite_run_with_the_users_install_exported_leaves_it_alone(tmp_path: Path) -> None:
    root = tmp_path / "users-install"
    # The inner suite's temp dirs under this test's (not on its command line, where its own
    # leak check would find it).
    (tmp_path / "inner").mkdir()
    env = {**os.environ, **canary(root), "PYTEST_DEBUG_TEMPROOT": str(tmp_path / "inner")}
    before = snapshot(root)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         f"{__file__}::test_the_suite_process_sees_none_of_the_users_install"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout
    assert snapshot(root) == before
