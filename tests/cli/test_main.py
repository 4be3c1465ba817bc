"""`llmgw server run` and `llmgw node run` refuse a misspelt option value as a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.server_process import run_cli


@pytest.mark.parametrize("command", [("server", "run"), ("node", "run", "--server", "http://x")])
@pytest.mark.parametrize(("option", "value"), [("--log-level", "loud"), ("--log-format", "xml")])
def test_a_misspelt_log_option_is_a_usage_error_not_a_traceback(
        tmp_path: Path, command: tuple[str, ...], option: str, value: str) -> None:
    env = {"LLMGW_DATA_DIR": str(tmp_path)}
    proc = run_cli(*command, option, value, env=env, check=False)
    assert proc.returncode == 2
    assert "Invalid value" in proc.stderr and value in proc.stderr
    assert "Traceback" not in proc.stderr
