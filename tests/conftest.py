"""Suite-wide rules and the shared real server.

A skipped test is a failed test: a missing part must not pass silently.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from llmgw.core.judges import DEMO_JUDGE
from llmgw.gateway.inflight import SharedInFlight
from llmgw.store.store import Store
from tests.support import isolation, mcp_upstream
from tests.support.mcp_everything import everything_http, everything_stdio
from tests.support.pg import fresh_database, postgres_url
from tests.support.redis_server import redis_server
from tests.support.server_process import LlmgwServer

# A real PostgreSQL for the store and cluster tests (tests/support/pg.py), a real Redis for the
# shared limits (tests/support/redis_server.py), and MCP's own server-everything as a third-party
# MCP server over streamable HTTP and stdio (tests/support/mcp_everything.py).
__all__ = ["everything_http", "everything_stdio", "postgres_url", "redis_server"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped tests fail in this suite: {report.longrepr}"


@pytest.fixture(scope="session", autouse=True)
def never_the_users_install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite's own HOME and XDG directories, and none of the user's LLMGW_* settings, for the
    test process (the in-process CLI runs) and every llmgw process it starts (tests/support/isolation.py)."""
    isolation.use_home(tmp_path_factory.mktemp("home"))
    before = isolation.isolate_this_process()
    yield
    os.environ.clear()
    os.environ.update(before)


@pytest.fixture
async def no_task_outlives_its_test() -> AsyncIterator[None]:
    """An async test ends with no asyncio task of its own still running: every background task
    is owned and cancelled on shutdown. Set up before the test's other fixtures, so it looks
    once they have all closed."""
    before = asyncio.all_tasks()
    yield
    here = asyncio.current_task()

    def running() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if t is not here and t not in before and not t.done()]

    if not running():
        return
    # A task cancelled by the last teardown ends at its next turn: give it those turns.
    for _ in range(5):
        await asyncio.sleep(0)
    left = running()
    for task in left:
        task.cancel()
    if left:
        names = ", ".join(sorted(f"{t.get_name()} ({t.get_coro()!r})" for t in left))
        pytest.fail(f"the test left {len(left)} task(s) running: {names}", pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            item.fixturenames.insert(0, "no_task_outlives_its_test")


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated store on each backend; on PostgreSQL a new empty database per test."""
    if request.param == "postgresql":
        url = fresh_database(request.getfixturevalue("postgres_url"))
    else:
        url = f"sqlite:///{tmp_path / 'llmgw.db'}"
    s = Store.open(url)
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    """A migrated SQLite store of the test's own."""
    s = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    yield s
    s.close()


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    """The store a test gets unless its folder says otherwise (tests/store: `any_store`)."""
    return sqlite_store


DEMO = "gemma3-270m"


@pytest.fixture(scope="session", autouse=True)
def no_engine_outlives_the_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every process a test started (servers, engines, fake hubs) is gone when the suite ends."""
    import psutil

    base = str(tmp_path_factory.getbasetemp())
    yield

    def leaked() -> list[str]:
        out = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            cmd = " ".join(proc.info["cmdline"] or [])
            if base in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(f"{proc.pid}: {cmd[:200]}")
        return out

    from tests.support.server_process import wait_for

    # Engines get SIGTERM, then SIGKILL after a grace period: allow them that long to go.
    wait_for("leaked engine processes to end", lambda: not leaked(), 15)


@pytest.fixture(scope="session")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmgwServer]:
    """`server init --demo` + `server run`, with the demo model's replica ready."""
    server = LlmgwServer.init(tmp_path_factory.mktemp("llmgw") / "data", "--demo")
    # For the remote-model test: the server proxies to itself with this key from its env.
    server.env["LLMGW_PROVIDER_TEST_KEY"] = server.admin_key
    with server.running():
        server.wait_ready(DEMO)
        # The demo guard judges every request and fails closed: its judge must be up too.
        server.wait_ready(DEMO_JUDGE)
        yield server


@pytest.fixture(scope="session")
def mcp_upstreams() -> Iterator[dict[str, mcp_upstream.RunningUpstream]]:
    """The SDK's test MCP servers (tests/support/mcp_upstream.py), one of each kind, by kind:
    `http` (which takes `mcp_upstream.TOKEN`), `http-json`, `sse` (the older HTTP+SSE
    transport), and `html` and `brotli`, which answer no MCP."""
    with mcp_upstream.upstreams() as running:
        yield running


@pytest.fixture
def client(demo_server: LlmgwServer) -> openai.OpenAI:
    """The official client pointed at llmgw with the admin key."""
    return openai.OpenAI(base_url=demo_server.url + "/v1", api_key=demo_server.admin_key,
                         max_retries=0, timeout=120)


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[SharedInFlight, SharedInFlight]]:
    """One server's in-flight table, as its worker 0 and worker 1 map it."""
    first = SharedInFlight(tmp_path / "in-flight", 2, 0, create=True)
    second = SharedInFlight(tmp_path / "in-flight", 2, 1)
    yield first, second
    second.close()
    first.close()
