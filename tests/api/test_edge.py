"""The HTTP edge's transport, over raw sockets to a running server, on both edges: parser errors
in OpenAI's shape that echo nothing, the handler's replies written as it made them, header and
keep-alive deadlines, and the bound on connections per client. (What the data plane answers is
the handler's, tested once in `test_handler`.)"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from llmgw.api.appkeys import GATEWAY
from llmgw.api.context import response_headers
from llmgw.api.edge import Connections, EdgeHandler, EdgeLimits, EdgeRunner
from llmgw.api.hot_edge import hot_routes
from llmgw.core.errors import RateLimited
from llmgw.gateway.service import Gateway
from tests.api.conftest import make_install

Route = tuple[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]


@dataclass
class Running:
    port: int
    admin_key: str
    runner: EdgeRunner


# Which edge serves the app: aiohttp's handlers alone, or llmgw's own connections answering the
# data plane's hot routes and handing aiohttp the rest (as `server run` serves). Every test here
# runs on both.
EDGE = {"hot": False}


@pytest.fixture(autouse=True, params=["aiohttp", "hot-routes"])
def edge(request: pytest.FixtureRequest) -> Iterator[None]:
    EDGE["hot"] = request.param == "hot-routes"
    yield
    EDGE["hot"] = False


@asynccontextmanager
async def serving(tmp_path: Path, limits: EdgeLimits, *routes: Route) -> AsyncIterator[Running]:
    """The real app behind the edge, listening on a free port."""
    install = make_install(tmp_path / "data", embedded_node=False)
    app = install.app()
    for path, handler in routes:
        app.router.add_get(path, handler)
    hot = hot_routes(app[GATEWAY], app._client_max_size) if EDGE["hot"] else None
    runner = EdgeRunner(app, limits, hot)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield Running(runner.addresses[0][1], install.admin_key, runner)
    finally:
        await runner.cleanup()


async def exchange(port: int, raw: bytes) -> bytes:
    """Send `raw`, read until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        async with asyncio.timeout(5):
            return await reader.read()
    finally:
        writer.close()


def parse(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One response with a Content-Length from a kept-alive connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    status, headers, _ = parse(head)
    return status, await reader.readexactly(int(headers["content-length"]))


LONG = b"x" * 9000
BAD_REQUESTS = {
    "control character": (b"GET /v1/models HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {key}\x01"
                          b"\r\n\r\n", 400),
    "header too large": (b"GET /v1/models HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {key}"
                         b"\r\nX-Big: " + LONG + b"\r\n\r\n", 431),
    "too many headers": (b"GET /v1/models HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {key}\r\n"
                         + b"".join(b"X-H%d: 1\r\n" % i for i in range(200)) + b"\r\n", 431),
    "bad method": (b"GE(T{key} /v1/models HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    "length and chunked": (b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nAuthorization: "
                           b"Bearer {key}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n"
                           b"\r\n0\r\n\r\n", 400),
    "negative length": (b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nAuthorization: "
                        b"Bearer {key}\r\nContent-Length: -1\r\n\r\n", 400),
    "http/2 preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n{key}", 400),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
async def test_parser_errors_are_openai_errors_that_echo_nothing_and_log_one_line(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    template, status = BAD_REQUESTS[case]
    caplog.set_level(logging.DEBUG)
    async with serving(tmp_path, EdgeLimits()) as srv:
        raw = template.replace(b"{key}", srv.admin_key.encode())
        answer = await exchange(srv.port, raw)
    got, headers, body = parse(answer)
    assert got == status, answer[:300]
    error = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["code"] == ("header_too_large" if status == 431 else "invalid_request")
    assert headers["content-type"].startswith("application/json")
    assert headers["server"] == "llmgw"  # no Python or aiohttp version
    assert b"aiohttp" not in answer and srv.admin_key[10:30].encode() not in answer
    secret = srv.admin_key[10:30]
    for record in caplog.records:
        assert secret not in record.getMessage(), record.getMessage()
        assert record.exc_info is None, record.getMessage()  # no traceback for a client's error
    refused = [r for r in caplog.records if "malformed request" in r.getMessage()]
    assert len(refused) == 1


@pytest.mark.parametrize("garbage", [BAD_REQUESTS["bad method"][0], b"\x16\x03\x01\x00 not http"])
async def test_a_request_pipelined_before_bytes_the_parser_refuses_is_answered_first(
        tmp_path: Path, garbage: bytes) -> None:
    """One write: a valid request, then bytes no request starts with. The client reads the
    valid request's answer, then the refusal (or the connection's end), never the refusal alone."""
    async with serving(tmp_path, EdgeLimits()) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        try:
            writer.write(b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n" + garbage)
            async with asyncio.timeout(5):
                status, body = await read_response(reader)
                rest = await reader.read()
        finally:
            writer.close()
    assert (status, orjson.loads(body)) == (200, {"status": "ok"})
    assert rest == b"" or parse(rest)[0] == 400, rest[:200]


async def test_a_body_that_cannot_be_decoded_is_a_400_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving(tmp_path, EdgeLimits()) as srv:
        answer = await exchange(srv.port, (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "
            + srv.admin_key.encode() + b"\r\nContent-Encoding: gzip\r\nContent-Length: 10\r\n"
            b"Connection: close\r\n\r\nnot gzip!!"))
    status, _, body = parse(answer)
    assert status == 400 and orjson.loads(body)["error"]["code"] == "invalid_request"
    assert [r.getMessage() for r in caplog.records if r.exc_info is not None] == []


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_the_handlers_refusal_is_written_with_its_retry_after_and_the_request_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    async def limited(*args: object) -> None:
        raise RateLimited("over the key's requests per minute", code="rate_limit_rpm",
                          retry_after_s=17)

    monkeypatch.setattr(Gateway, "forward", limited)
    async with serving(tmp_path, EdgeLimits()) as srv:
        answer = await exchange(srv.port, (
            b"POST %s HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer %s\r\nX-Request-Id: "
            b"req-edge-1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
            % (path.encode(), srv.admin_key.encode())))
    status, headers, body = parse(answer)
    assert (status, headers["retry-after"], headers["x-request-id"]) == (429, "17", "req-edge-1")
    error = orjson.loads(body)
    assert error["type"] == "error" if path == "/v1/messages" else error["error"]["code"] == \
        "rate_limit_rpm"


async def test_every_normal_answer_hides_the_server_version(tmp_path: Path) -> None:
    async def stream(request: web.Request) -> web.StreamResponse:
        # As the request path prepares its streams.
        out = web.StreamResponse(headers=response_headers(request, {"Content-Type": "text/plain"}))
        await out.prepare(request)
        await out.write(b"x")
        return out

    async with serving(tmp_path, EdgeLimits(), ("/stream", stream)) as srv:
        answers = [await exchange(srv.port, b"GET %s HTTP/1.1\r\nHost: a\r\nConnection: close"
                                            b"\r\n\r\n" % path)
                   for path in (b"/health", b"/nope", b"/stream")]
    for answer in answers:
        status, headers, _ = parse(answer)
        assert status in (200, 404) and headers["server"] == "llmgw"


async def test_half_sent_headers_are_closed_by_the_header_timeout(tmp_path: Path) -> None:
    async with serving(tmp_path, EdgeLimits(header_timeout_s=0.5)) as srv:
        # The slowloris: a request line and one header, then nothing. The server closes it.
        assert await exchange(srv.port, b"GET /health HTTP/1.1\r\nHost: a\r\n") == b""
        # A connection that never sends a byte is closed too.
        assert await exchange(srv.port, b"") == b""
        # On a kept-alive connection the next request's headers have the same deadline.
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n")
        status, _ = await read_response(reader)
        assert status == 200
        writer.write(b"GET /health HTTP/1.1\r\n")
        async with asyncio.timeout(5):
            assert await reader.read() == b""
        writer.close()


async def test_the_header_deadline_never_cuts_a_request_being_handled(tmp_path: Path) -> None:
    handling: asyncio.Queue[EdgeHandler] = asyncio.Queue()
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        assert isinstance(request.protocol, EdgeHandler)
        handling.put_nowait(request.protocol)
        await release.wait()
        return web.Response(text="done")

    async with serving(tmp_path, EdgeLimits(header_timeout_s=3600), ("/slow", slow)) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        handler = await handling.get()
        handler._expire()  # the deadline comes while the request is handled: a fake clock's tick
        release.set()
        status, body = await read_response(reader)
        assert (status, body) == (200, b"done")
        writer.close()


async def test_an_idle_kept_alive_connection_is_closed(tmp_path: Path) -> None:
    async with serving(tmp_path, EdgeLimits(keepalive_timeout_s=0.2)) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n")
        assert (await read_response(reader))[0] == 200
        async with asyncio.timeout(5):
            assert await reader.read() == b""
        writer.close()


async def test_connections_past_the_bound_per_client_get_a_503_in_openai_shape(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, EdgeLimits(max_per_client=4)) as srv:
        async def one() -> tuple[int, bytes, asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n")
            async with asyncio.timeout(5):
                status, body = await read_response(reader)
            return status, body, writer

        # A burst of 10 from one address: exactly 4 are served, 6 refused with a 503.
        results = await asyncio.gather(*(one() for _ in range(10)))
        statuses = sorted(status for status, _, _ in results)
        assert statuses == [200] * 4 + [503] * 6
        refused = next(body for status, body, _ in results if status == 503)
        assert orjson.loads(refused)["error"]["code"] == "too_many_connections"
        assert srv.runner.connections.held("127.0.0.1") == 4
        # Closing one frees its place for the next connection.
        kept = [w for status, _, w in results if status == 200]
        kept[0].close()
        await kept[0].wait_closed()
        async with asyncio.timeout(5):
            while srv.runner.connections.held("127.0.0.1") > 3:
                await asyncio.sleep(0)  # the server sees the close on its next turn
        status, _, writer = await one()
        assert status == 200
        for w in [*kept, writer]:
            w.close()


def test_the_connection_count_is_per_address_and_warns_once_per_episode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conns = Connections(2)
    assert conns.admit("a") and conns.admit("a") and conns.admit("b")
    assert not conns.admit("a") and not conns.admit("a")
    assert len([r for r in caplog.records if "refusing connections from a" in r.getMessage()]) == 1
    conns.release("a")
    assert conns.admit("a") and not conns.admit("a")
    assert len([r for r in caplog.records if "refusing connections from a" in r.getMessage()]) == 2
    assert Connections(0).admit("a")  # 0: no bound
