"""A server without models, engines or guard for ctl's tests (started once per module), and ctl
with no server at all."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from llmgw.cli import ctl
from llmgw.cli.client import AdminClient
from tests.support.server_process import LlmgwServer

# Nothing listens here: a request to a model behind it fails at once.
DOWN = "http://127.0.0.1:9/v1"


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmgwServer]:
    """A server with two remote models that cannot be reached (no engine, no guard)."""
    s = LlmgwServer.init(tmp_path_factory.mktemp("llmgw") / "data", "--no-guard")
    # One process: a route's cooldowns are each worker's own and `ctl route show` shows the
    # main process's, so the failing request must be one the main process served.
    s.start("--workers", "1")
    try:
        for name in ("down-1", "down-2"):
            s.call("POST", "/admin/v1/models", {"name": name,
                                                "source": {"kind": "remote", "base_url": DOWN}})
        yield s
    finally:
        s.stop()




OfflineCtl = Callable[..., str]


@pytest.fixture
def offline_ctl(monkeypatch: pytest.MonkeyPatch) -> OfflineCtl:
    """`llmgw ctl ARGS` with no server: each admin call is answered from `answers` (path → JSON).
    Returns what it printed at `columns` wide."""
    def run(answers: dict[str, Any], *args: str, columns: int = 80) -> str:
        monkeypatch.setattr(AdminClient, "call", lambda _self, _method, path, _body=None: answers[path])
        result = CliRunner().invoke(ctl.app, ["--url", "http://127.0.0.1:9", "--key", "sk-llmgw-x", *args],
                                    env={"COLUMNS": str(columns)})
        assert result.exit_code == 0, result.output
        return result.stdout
    return run
