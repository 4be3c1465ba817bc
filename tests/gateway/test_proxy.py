"""Forwarding to upstreams: retry on a refused connection, byte-exact streams, clear failures."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.core.errors import LlmgwError
from llmgw.core.types import LocalSource, Model, Profile
from llmgw.gateway.proxy import UpstreamClient
from llmgw.gateway.routing import Route, RoutingTable, Upstream

SEEN = web.AppKey("seen", list[bytes])
SSE = b"".join(b'data: {"i": %d}\n\n' % i for i in range(20)) + b"data: [DONE]\n\n"


def dead_port() -> int:
    """A port with nothing listening: connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def upstream() -> AsyncIterator[TestServer]:
    """A stand-in engine: JSON for plain requests, 20 SSE events for streams."""
    seen: list[bytes] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen.append(body)
        if b'"stream": true' in body or b'"stream":true' in body:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(0, len(SSE), 17):  # odd-sized writes: chunking must not matter
                await resp.write(SSE[i : i + 17])
            return resp
        return web.json_response({"object": "chat.completion", "echo": body.decode()})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app[SEEN] = seen
    server = TestServer(app)
    await server.start_server()
    yield server
    await server.close()


@pytest.fixture
async def gateway_client() -> AsyncIterator[tuple[UpstreamClient, list[Any]]]:
    client = UpstreamClient(timeout_s=10)
    await client.start()
    yield client, []
    await client.close()


def local_model() -> Model:
    return Model(name="m", source=LocalSource(path="/m.gguf"), profiles=[Profile(name="cpu")])


async def through(
    client: UpstreamClient, route: Route, body: bytes, stream: bool = False
) -> tuple[int, bytes]:
    """Call `forward` from inside a real aiohttp handler and return what its client got."""
    table = RoutingTable({"m": route})
    errors: list[LlmgwError] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            return await client.forward(
                request, table, route, "/chat/completions", body, {"model": "m"}, stream
            )
        except LlmgwError as exc:
            errors.append(exc)
            return web.Response(status=exc.status, text=exc.message)

    app = web.Application()
    app.router.add_post("/", handler)
    async with TestClient(TestServer(app)) as tc:
        resp = await tc.post("/", data=body)
        return resp.status, await resp.read()


async def test_a_refused_replica_is_skipped_and_the_other_answers(
    upstream: TestServer, gateway_client: Any
) -> None:
    client, _ = gateway_client
    dead = Upstream("dead", f"http://127.0.0.1:{dead_port()}/v1")
    live = Upstream("live", str(upstream.make_url("/v1")))
    # Each call builds a fresh table whose first pick is the second upstream: the dead one.
    route = Route(local_model(), (live, dead))
    for _ in range(4):
        status, body = await through(client, route, b'{"model": "m"}')
        assert status == 200 and b"chat.completion" in body
    assert dead.outstanding == 0 and live.outstanding == 0
    # Until the routing table learns the replica is gone, it goes last: no request waits on it.
    assert dead.down_until > time.monotonic()


async def test_two_refusals_are_a_502(gateway_client: Any) -> None:
    client, _ = gateway_client
    route = Route(
        local_model(),
        (
            Upstream("a", f"http://127.0.0.1:{dead_port()}/v1"),
            Upstream("b", f"http://127.0.0.1:{dead_port()}/v1"),
        ),
    )
    status, body = await through(client, route, b'{"model": "m"}')
    assert status == 502 and b"could not connect" in body


async def test_a_stream_arrives_byte_for_byte(upstream: TestServer, gateway_client: Any) -> None:
    client, _ = gateway_client
    route = Route(local_model(), (Upstream("live", str(upstream.make_url("/v1"))),))
    status, body = await through(client, route, b'{"model": "m", "stream": true}', stream=True)
    assert status == 200 and body == SSE


async def test_the_body_is_forwarded_untouched(upstream: TestServer, gateway_client: Any) -> None:
    client, _ = gateway_client
    route = Route(local_model(), (Upstream("live", str(upstream.make_url("/v1"))),))
    raw = b'{"model": "m", "tools": [{"type": "function"}], "x_custom": 1}'
    await through(client, route, raw)
    assert upstream.app[SEEN] == [raw]
