"""An extra worker passes admin, agent and console requests to the main process: as they came,
answers relayed whole or streamed, and nothing of one client's exchange carried into another's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.api.context import RELAYED_FOR, RELAYED_HTTPS, client_address, over_https
from llmgw.api.errors import openai_errors
from llmgw.api.forward import main_session, to_main


async def _echo(request: web.Request) -> web.Response:
    """The main process's side: says what it was sent, and hands out a cookie."""
    body = await request.read()
    resp = web.json_response({
        "method": request.method, "path": request.path_qs, "body": body.decode(),
        "cookie": request.headers.get("Cookie"), "host": request.headers.get("Host"),
        "request_id": request.headers.get("X-Request-Id"),
        "authorization": request.headers.get("Authorization"),
        "client": client_address(request), "https": over_https(request),
    })
    resp.set_cookie("session", "for-whoever-signed-in", httponly=True)
    return resp


async def _stream(request: web.Request) -> web.StreamResponse:
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await out.prepare(request)
    for i in range(3):
        await out.write(f"data: {i}\n\n".encode())
    await out.write_eof()
    return out


@pytest.fixture
async def main_socket(tmp_path: Path) -> AsyncIterator[Path]:
    app = web.Application()
    app.router.add_route("*", "/admin/v1/echo", _echo)
    app.router.add_get("/admin/v1/stream", _stream)
    runner = web.AppRunner(app)
    await runner.setup()
    path = tmp_path / "main.sock"
    await web.UnixSite(runner, str(path)).start()
    yield path
    await runner.cleanup()


async def _worker(socket: Path) -> TestClient[web.Request, web.Application]:
    sessions: list[aiohttp.ClientSession] = []

    def session() -> aiohttp.ClientSession:
        if not sessions:
            sessions.append(main_session(str(socket)))
        return sessions[0]

    app = web.Application(middlewares=[openai_errors])
    app.router.add_route("*", "/{tail:.*}", to_main(session))

    async def close(_app: web.Application) -> AsyncIterator[None]:
        yield
        for s in sessions:
            await s.close()

    app.cleanup_ctx.append(close)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_a_request_reaches_the_main_process_as_it_came(main_socket: Path) -> None:
    client = await _worker(main_socket)
    try:
        resp = await client.post("/admin/v1/echo?x=1", data=b'{"a": 1}',
                                 headers={"Authorization": "Bearer sk-admin",
                                          "X-Request-Id": "req-from-client"})
        assert resp.status == 200
        seen = await resp.json()
        assert seen["method"] == "POST" and seen["path"] == "/admin/v1/echo?x=1"
        assert seen["body"] == '{"a": 1}' and seen["authorization"] == "Bearer sk-admin"
        assert seen["request_id"] == "req-from-client"  # one id in both processes' logs
        assert seen["host"] == f"{client.host}:{client.port}"
        assert "session=for-whoever-signed-in" in resp.headers["Set-Cookie"]
    finally:
        await client.close()


async def test_a_cookie_one_client_got_never_rides_on_another_clients_request(
        main_socket: Path) -> None:
    client = await _worker(main_socket)
    try:
        first = await client.get("/admin/v1/echo")
        assert "Set-Cookie" in first.headers  # the relay's own client kept none of it
        client.session.cookie_jar.clear()  # another client: no cookie of its own
        second = await (await client.get("/admin/v1/echo")).json()
        assert second["cookie"] is None
    finally:
        await client.close()


async def test_a_stream_is_relayed_as_it_comes(main_socket: Path) -> None:
    client = await _worker(main_socket)
    try:
        resp = await client.get("/admin/v1/stream")
        assert resp.headers["Content-Type"] == "text/event-stream"
        assert await resp.text() == "data: 0\n\ndata: 1\n\ndata: 2\n\n"
    finally:
        await client.close()


async def test_a_main_process_that_is_gone_is_a_503_in_openais_shape(tmp_path: Path) -> None:
    client = await _worker(tmp_path / "nobody-listens.sock")
    try:
        resp = await client.get("/admin/v1/echo")
        assert resp.status == 503
        body = await resp.json()
        assert body["error"]["code"] == "server_unreachable"
    finally:
        await client.close()


async def test_the_main_process_sees_the_clients_address_and_no_forged_one(main_socket: Path) -> None:
    # Sign-in limits and the audit log count by it: behind a worker every client would
    # otherwise be the worker's socket, and one client could pose as another.
    client = await _worker(main_socket)
    try:
        resp = await client.get("/admin/v1/echo", headers={RELAYED_FOR: "10.9.9.9",
                                                            RELAYED_HTTPS: "1"})
        answer = await resp.json()
        assert (answer["client"], answer["https"]) == ("127.0.0.1", False)
    finally:
        await client.close()


async def test_a_client_cannot_pose_as_a_worker_over_tcp() -> None:
    app = web.Application()
    app.router.add_get("/admin/v1/echo", _echo)
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/admin/v1/echo", headers={RELAYED_FOR: "10.9.9.9"})
        assert (await resp.json())["client"] == "127.0.0.1"
