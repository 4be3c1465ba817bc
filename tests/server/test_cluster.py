"""Two servers on one PostgreSQL: one leader runs the control loops; when it goes, the other
takes over (real store, real clock with short lease timings)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.api.edge import EdgeRunner
from llmgw.core.settings import load
from llmgw.server.app import Server
from llmgw.server.cluster import server_views
from llmgw.server.init import init
from llmgw.server.run import edge_limits, stop_gracefully
from llmgw.store.server_repo import ServerRow
from llmgw.store.store import Store
from tests.support.pg import fresh_database


async def wait_until(what: str, check: Any, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_one_leader_and_a_handover_when_it_stops(postgres_url: str, tmp_path: Path) -> None:
    url = fresh_database(postgres_url)
    result = init(tmp_path / "a", database=url, guard=False)
    headers = {"Authorization": f"Bearer {result.admin_key}"}
    clients: list[TestClient[Any, Any]] = []
    for name in ("a", "b"):
        data = tmp_path / name
        if name == "b":  # the second server shares the first one's install secret and database
            data.mkdir()
            (data / "config.toml").write_text((tmp_path / "a" / "config.toml").read_text())
        settings = load(data).model_copy(update={
            "node_id": f"node-{name}", "leader_ttl_s": 1.5, "leader_renew_deadline_s": 1.0,
            "leader_retry_s": 0.2,
        })
        app = Server(data, settings, Store.open(url)).build_app()
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)

    async def statuses() -> list[dict[str, Any]]:
        return [await (await c.get("/admin/v1/cluster", headers=headers)).json() for c in clients]

    async def one_leader() -> bool:
        return sum(s["leading"] for s in await statuses()) == 1

    try:
        await wait_until("one leader", one_leader)
        first = await statuses()
        leader = next(i for i, s in enumerate(first) if s["leading"])
        assert first[0]["lease"]["holder"] == first[leader]["server"]
        # The leader stops cleanly: it releases the lease, and the other takes over at once.
        await clients[leader].close()
        other = clients[1 - leader]

        async def took_over() -> bool:
            s = await (await other.get("/admin/v1/cluster", headers=headers)).json()
            return bool(s["leading"] and s["epoch"] == first[leader]["epoch"] + 1)

        await wait_until("the other server to take over", took_over, 5)
    finally:
        for c in clients:
            await c.close()


async def test_a_stopping_leader_hands_over_before_its_requests_drain(
    postgres_url: str, tmp_path: Path
) -> None:
    url = fresh_database(postgres_url)
    result = init(tmp_path / "a", database=url, guard=False)
    headers = {"Authorization": f"Bearer {result.admin_key}"}
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.toml").write_text((tmp_path / "a" / "config.toml").read_text())
    timing = {"leader_ttl_s": 30.0, "leader_renew_deadline_s": 20.0, "leader_retry_s": 0.2,
              "embedded_node": False}
    arrived, release = asyncio.Event(), asyncio.Event()

    async def slow(_request: web.Request) -> web.Response:
        arrived.set()
        await release.wait()
        return web.Response(text="finished")

    # Server a starts first and leads; b follows.
    settings = load(tmp_path / "a").model_copy(update=timing)
    leader = Server(tmp_path / "a", settings, Store.open(url), server_id="server-a")
    app = leader.build_app()
    app.router.add_get("/slow", slow)
    runner = EdgeRunner(app, edge_limits(settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    other = TestClient(TestServer(Server(
        tmp_path / "b", load(tmp_path / "b").model_copy(update=timing), Store.open(url),
        server_id="server-b").build_app()))
    await other.start_server()

    async def status() -> Any:
        return await (await other.get("/admin/v1/cluster", headers=headers)).json()

    try:
        async with aiohttp.ClientSession() as session:
            async def a_leads() -> bool:
                async with session.get(base + "/admin/v1/cluster", headers=headers) as r:
                    return bool((await r.json())["leading"])

            await wait_until("server a to lead", a_leads)
            epoch = (await status())["lease"]["epoch"]
            call = asyncio.create_task(session.get(base + "/slow"))
            await arrived.wait()
            stopping = asyncio.create_task(stop_gracefully(leader, runner))

            async def took_over() -> bool:
                s = await status()
                return bool(s["leading"] and s["epoch"] == epoch + 1
                            and [v["id"] for v in s["servers"]] == ["server-b"])

            # Well before a's 30 s lease could expire, and while its request is in flight.
            await wait_until("b to take over and a to leave the list", took_over, 5)
            assert not call.done()
            release.set()
            resp = await call
            assert resp.status == 200 and await resp.text() == "finished"
            await stopping
    finally:
        await other.close()
        await runner.cleanup()


def test_a_server_whose_heartbeat_stopped_is_listed_as_gone_and_never_as_leader() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    started = now - timedelta(hours=1)
    rows = [ServerRow("killed-9", "http://a", started, now - timedelta(seconds=31)),
            ServerRow("alive", "http://b", started, now - timedelta(seconds=5)),
            ServerRow("edge", "http://c", started, now - timedelta(seconds=30))]
    # The killed server held the lease when it died (not expired yet on the clock's reading).
    views = {v.id: v for v in server_views(rows, "killed-9", now, timedelta(seconds=30))}
    assert views["killed-9"].state == "gone" and views["killed-9"].leader is False
    assert views["alive"].state == "live" and views["edge"].state == "live"
    assert views["killed-9"].seen_s_ago == 31.0
    views = {v.id: v for v in server_views(rows, "alive", now, timedelta(seconds=30))}
    assert views["alive"].leader is True
