"""`server run`: a client that goes away takes its request's upstream call with it; a stop
leaves the cluster before it drains the requests in flight, within a bound; the open-files limit."""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from llmgw.api.edge import EdgeRunner
from llmgw.control.serve_jobs import ServeJobs
from llmgw.core.settings import load
from llmgw.core.types import Limits
from llmgw.gateway.mcp.usage import Outcome
from llmgw.server.app import Server
from llmgw.server.init import init
from llmgw.server.run import OPEN_FILES_CAP, edge_limits, raise_open_files_limit, stop_gracefully
from llmgw.store.store import Store
from tests.fakes.provider import ANSWER, FakeProvider, GatewayRig
from tests.gateway.mcp.test_usage import written


def test_the_open_files_limit_is_raised_to_the_hard_limit() -> None:
    set_to: list[tuple[int, int]] = []
    got = raise_open_files_limit(lambda _: (1024, 524288), lambda _, v: set_to.append(v))
    assert got == 524288 and set_to == [(524288, 524288)]
    # An unlimited hard limit: the soft one stops at a number the kernel accepts.
    set_to.clear()
    got = raise_open_files_limit(lambda _: (1024, resource.RLIM_INFINITY),
                                 lambda _, v: set_to.append(v))
    assert got == OPEN_FILES_CAP and set_to == [(OPEN_FILES_CAP, resource.RLIM_INFINITY)]


def test_a_limit_that_cannot_be_raised_is_said_and_kept(caplog: pytest.LogCaptureFixture) -> None:
    def refuse(_: int, __: tuple[int, int]) -> None:
        raise ValueError("not allowed")

    assert raise_open_files_limit(lambda _: (1024, 4096), refuse) == 1024
    assert "could not raise the open-files limit from 1024 to 4096" in caplog.text


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def start(tmp_path: Path, drain_s: float, slow: Handler) -> tuple[Server, EdgeRunner, str]:
    init(tmp_path / "data", guard=False)
    settings = load(tmp_path / "data").model_copy(update={
        "embedded_node": False, "drain_timeout_s": drain_s})
    server = Server(tmp_path / "data", settings, Store.open(settings.database_url(tmp_path / "data")))
    app = server.build_app()
    app.router.add_get("/slow", slow)
    runner = EdgeRunner(app, edge_limits(settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return server, runner, f"http://127.0.0.1:{runner.addresses[0][1]}/slow"


def running(name: str) -> bool:
    return any(t.get_name() == name and not t.done() for t in asyncio.all_tasks())


async def test_a_stop_leaves_the_cluster_first_then_lets_the_request_in_flight_finish(
    tmp_path: Path,
) -> None:
    arrived, release = asyncio.Event(), asyncio.Event()

    async def slow(_request: web.Request) -> web.Response:
        arrived.set()
        await release.wait()
        return web.Response(text="finished")

    server, runner, url = await start(tmp_path, 30, slow)
    store = server.store
    assert [row.id for row in store.servers.list()] == [server.server_id]
    async with aiohttp.ClientSession() as session:
        call = asyncio.create_task(session.get(url))
        await arrived.wait()
        assert running("replica-keeper") and running("heartbeat")
        stopping = asyncio.create_task(stop_gracefully(server, runner))
        async with asyncio.timeout(10):
            while store.servers.list():  # the stop is under way in its own task
                await asyncio.sleep(0.01)
        # Out of the cluster while the request is still in flight: no leader loop, no
        # heartbeat, not listed.
        assert not call.done() and not stopping.done()
        assert not running("replica-keeper") and not running("judge-keeper")
        assert not running("heartbeat") and not running("leadership")
        release.set()
        resp = await call
        assert resp.status == 200 and await resp.text() == "finished"
        async with asyncio.timeout(10):
            await stopping


async def test_a_stop_ends_the_tool_usage_writer_and_writes_what_it_had_counted(
    tmp_path: Path,
) -> None:
    async def nothing(_request: web.Request) -> web.Response:
        return web.Response()

    server, runner, _url = await start(tmp_path, 5, nothing)
    assert running("mcp-usage")
    assert server.plane is not None
    server.plane.tools.meter.record("key-a", "github", "search", Outcome.OK, 0.5)
    async with asyncio.timeout(10):
        await stop_gracefully(server, runner)
    assert not running("mcp-usage")
    [row] = written(server.store).values()
    assert (row.key_id, row.server, row.calls, row.cost) == ("key-a", "github", 1, 0.5)


async def test_a_stop_while_the_leader_is_still_taking_over_jobs_stops_its_loops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resuming, never = asyncio.Event(), asyncio.Event()

    async def slow_resume(_jobs: ServeJobs) -> list[str]:
        resuming.set()
        await never.wait()  # a store slow to list the jobs to resume
        return []

    async def unused(_request: web.Request) -> web.Response:
        return web.Response()

    monkeypatch.setattr(ServeJobs, "take_over", slow_resume)
    server, runner, _url = await start(tmp_path, 1.0, unused)
    async with asyncio.timeout(10):
        await resuming.wait()
    assert running("replica-keeper")  # started, while the jobs are still being taken over
    async with asyncio.timeout(10):
        await stop_gracefully(server, runner)
    assert not running("replica-keeper") and not running("judge-keeper")
    assert not running("serve-jobs")


async def test_the_drain_is_bounded(tmp_path: Path) -> None:
    arrived, cancelled = asyncio.Event(), asyncio.Event()

    async def stuck(_request: web.Request) -> web.Response:
        arrived.set()
        try:
            await asyncio.Event().wait()  # an upstream that never answers
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    drain_s = 1.0
    server, runner, url = await start(tmp_path, drain_s, stuck)
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as session:
        call = asyncio.create_task(session.get(url))
        await arrived.wait()
        began = loop.time()
        async with asyncio.timeout(10):  # aiohttp's own default is 60 s
            await stop_gracefully(server, runner)
        # aiohttp alone waits the bound twice for a request that ignores being told to stop.
        assert loop.time() - began < 2 * drain_s
        assert cancelled.is_set()
        with pytest.raises(aiohttp.ClientError):
            await call



@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[GatewayRig]:
    provider = await FakeProvider(stall=True).start()
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    r = await GatewayRig(provider, store, limits=Limits(concurrent=2)).start()
    yield r
    await r.close()
    await provider.close()
    store.close()


async def next_one(queue: asyncio.Queue[None], what: str) -> None:
    try:
        await asyncio.wait_for(queue.get(), 5)
    except TimeoutError:
        pytest.fail(f"{what} never happened")


def body(stream: bool) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}


async def test_clients_that_leave_free_their_slots_and_the_upstream_at_once(rig: GatewayRig) -> None:
    provider = rig.provider
    headers = {"Authorization": f"Bearer {rig.plaintext}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        url = rig.url + "/v1/chat/completions"
        # A stream against a stalled upstream: its headers came, then nothing more.
        stream = await session.post(url, json=body(True))
        assert stream.status == 200
        await next_one(provider.arrived, "the streamed request reaching the upstream")
        # A whole answer the upstream is still working on: nothing has come back yet.
        whole = asyncio.create_task(session.post(url, json=body(False)))
        await next_one(provider.arrived, "the whole request reaching the upstream")
        full = await session.post(url, json=body(False))
        assert full.status == 429  # --concurrent 2: both slots are taken
        assert (await full.json())["error"]["code"] == "rate_limit_concurrent"

        stream.close()  # both clients go away
        whole.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await whole
        await next_one(provider.left, "one upstream connection closing")
        await next_one(provider.left, "the other upstream connection closing")

        provider.stall = False
        answers = await asyncio.gather(*(session.post(url, json=body(False)) for _ in range(2)))
        assert [a.status for a in answers] == [200, 200]  # both slots were freed with them
        assert [(await a.json())["choices"][0]["message"]["content"] for a in answers] == [ANSWER] * 2
    assert rig.meter is not None
    await rig.meter.flush()
    # The abandoned requests are not counted as errors; nothing they did not use is counted.
    [row] = rig.store.usage.usage()
    assert (row.requests, row.errors, row.prompt_tokens, row.completion_tokens) == (4, 0, 18, 10)
