"""A server without models, engines or guard for ctl's tests (started once per module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.server_process import LlmgwServer

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


