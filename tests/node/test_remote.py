"""A node agent's link to its servers, against real HTTP servers speaking the agent API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from llmgw.core.errors import JoinRefused, ServerUnreachable
from llmgw.core.types import ReplicaState
from llmgw.node.remote import CHANGES_PATH, SYNC_PATH, ServerLink
from llmgw.node.supervisor import Status
from tests.factories import node, replica_placed
from tests.support.server_process import free_port


class FakeServer:
    """Records every sync body and answers with one assignment (or a chosen status)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.bodies: list[dict[str, Any]] = []
        # The store's revisions, handed out one per changes call that is past the previous one.
        self.revisions: asyncio.Queue[int] = asyncio.Queue()
        self.watched: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        app = web.Application()
        app.router.add_post(SYNC_PATH, self.sync)
        app.router.add_get(CHANGES_PATH, self.changes)
        self.server = TestServer(app)

    async def changes(self, request: web.Request) -> web.Response:
        self.watched.put_nowait(dict(request.query))
        return web.json_response({"revision": await self.revisions.get()})

    async def sync(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        if self.status != 200:
            return web.json_response({"error": {"message": "Incorrect API key provided"}},
                                     status=self.status)
        assert request.headers["Authorization"] == "Bearer join-token"
        rep = replica_placed("r1", "m1", node_id=body["node"]["id"])
        return web.json_response({"assignments": [{"replica": rep.model_dump(mode="json"),
                                                   "model": None}],
                                  "engine_key": "k-1"})

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")


@pytest.fixture
async def servers() -> AsyncIterator[list[FakeServer]]:
    started = [FakeServer(), FakeServer()]
    for s in started:
        await s.server.start_server()
    yield started
    for s in started:
        await s.server.close()


async def link_to(*urls: str) -> ServerLink:
    link = ServerLink(list(urls), "join-token", lambda: node("node-a"), timeout_s=2,
                      agent="agent-a")
    await link.start()
    return link


async def test_a_round_brings_assignments_and_the_engine_key(servers: list[FakeServer]) -> None:
    link = await link_to(servers[0].url)
    try:
        assigned = await link.assignments()
    finally:
        await link.close()
    assert [a.replica.id for a in assigned] == ["r1"]
    assert link.engine_key == "k-1"
    assert servers[0].bodies[0]["node"]["id"] == "node-a"


async def test_a_dead_server_is_skipped_for_the_next_one(servers: list[FakeServer]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    link = await link_to(dead, servers[1].url)
    try:
        await link.assignments()
        await link.assignments()
    finally:
        await link.close()
    # The second round starts with the server that answered, not with the dead one.
    assert len(servers[1].bodies) == 2


async def test_reports_made_while_cut_off_reach_the_server_later(servers: list[FakeServer]) -> None:
    gone = f"http://127.0.0.1:{free_port()}"
    link = await link_to(gone)
    try:
        await link.report("r1", Status(ReplicaState.READY, endpoint="http://127.0.0.11:9/v1"))
        await link.forget("r0")
        with pytest.raises(ServerUnreachable, match="no server reachable"):
            await link.assignments()
        # The servers come back (here: the link is pointed at one that answers).
        link._servers = [servers[0].url]
        await link.assignments()
        await link.assignments()
    finally:
        await link.close()
    first, second = servers[0].bodies
    assert first["replicas"][0]["state"] == "ready" and first["stopped"] == ["r0"]
    # Sent once: a report the server has is not sent again.
    assert second["replicas"] == [] and second["stopped"] == []


async def test_a_refused_token_is_a_clear_error() -> None:
    refusing = FakeServer(status=401)
    await refusing.server.start_server()
    link = await link_to(refusing.url)
    try:
        with pytest.raises(JoinRefused, match="refused this node: Incorrect API key"):
            await link.assignments()
    finally:
        await link.close()
        await refusing.server.close()


async def test_the_agent_is_woken_when_the_store_moves_and_only_then(servers: list[FakeServer]) -> None:
    server = servers[0]
    link = await link_to(server.url)
    woken = asyncio.Event()
    watch = asyncio.create_task(link.watch(woken.set, retry_s=0.01))
    try:
        async with asyncio.timeout(10):
            first = await server.watched.get()
            assert first == {"since": "-1", "wait": "25.0"}
            await server.revisions.put(7)  # the first answer only says where the store is
            assert (await server.watched.get())["since"] == "7"
            await server.revisions.put(7)  # a held call that timed out: nothing moved
            assert (await server.watched.get())["since"] == "7"
            assert not woken.is_set()
            await server.revisions.put(8)  # a placement
            await woken.wait()
    finally:
        watch.cancel()
        await asyncio.wait({watch})
        await link.close()


async def test_a_server_without_the_changes_call_ends_the_watch_and_nothing_else() -> None:
    app = web.Application()  # an earlier version: no /agent/v1/changes
    old = TestServer(app)
    await old.start_server()
    link = await link_to(str(old.make_url("")).rstrip("/"))
    try:
        async with asyncio.timeout(10):
            await link.watch(lambda: None)  # returns: the agent's rounds go on as before
    finally:
        await link.close()
        await old.close()
