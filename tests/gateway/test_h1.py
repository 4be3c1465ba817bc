"""The upstream HTTP/1.1 client: bodies arrive as the upstream sent them (chunked, compressed,
delimited by close), stalls end at the deadline, broken answers are errors, and connections are
reused only when that is safe."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

import pytest

from llmgw.core.errors import UpstreamError, UpstreamTimeout
from llmgw.core.types import Model, RemoteSource
from llmgw.gateway.h1 import Pool, target
from llmgw.gateway.h1_connection import ConnectError, H1Error, Proto, Response
from llmgw.gateway.reach import connect
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.table import Serving, Upstream
from tests.fakes.timers import ManualTimers
from tests.gateway.test_transport import dead_port

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawUpstream:
    """A TCP server answering each request with `answer`; counts connections and requests."""

    answer: Answer
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                self.requests.append(head + await reader.readexactly(length))
                await self.answer(reader, writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def raw() -> AsyncIterator[Callable[[Answer], Awaitable[RawUpstream]]]:
    servers: list[asyncio.Server] = []

    async def start(answer: Answer) -> RawUpstream:
        up = RawUpstream(answer)
        up.server = await asyncio.start_server(up._serve, "127.0.0.1", 0)
        servers.append(up.server)
        return up

    yield start
    for s in servers:
        s.close()


@pytest.fixture
async def pool() -> AsyncIterator[Pool]:
    p = Pool(connect_timeout_s=2)
    yield p
    await p.close()


def replying(head: bytes, *parts: bytes, close: bool = False, pause: float = 0) -> Answer:
    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        for part in parts:
            await writer.drain()
            if pause:
                await asyncio.sleep(pause)
            writer.write(part)
        await writer.drain()
        if close:
            writer.close()

    return answer


async def body_of(resp: Response) -> bytes:
    out = b""
    while chunk := await resp.readany():
        out += chunk
    return out


async def test_a_chunked_answer_arrives_byte_for_byte_and_the_connection_is_reused(
    raw: Callable[[Answer], Awaitable[RawUpstream]], pool: Pool
) -> None:
    events = [b'data: {"i": %d}\n\n' % i for i in range(5)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    up = await raw(replying(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                            b"Transfer-Encoding: chunked\r\n\r\n", chunked[:7], chunked[7:]))
    for _ in range(3):
        resp = await pool.post(up.url, "/chat/completions", b'{"a": 1}', {"X-K": "v"}, 5)
        assert resp.status == 200 and resp.headers["content-type"] == "text/event-stream"
        assert await body_of(resp) == b"".join(events)
        resp.release()
    assert up.connections == 1
    assert up.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nX-K: v\r\n" in up.requests[0] and up.requests[0].endswith(b'\r\n\r\n{"a": 1}')


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
async def test_a_compressed_answer_is_decoded(
    raw: Callable[[Answer], Awaitable[RawUpstream]], pool: Pool, encoding: str
) -> None:
    body = b'{"text": "' + b"sea " * 5000 + b'"}'
    if encoding == "gzip":
        packed = gzip.compress(body)
    elif encoding == "deflate":
        packed = zlib.compress(body)
    else:
        z = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        packed = z.compress(body) + z.flush()
    name = encoding.removeprefix("raw-").encode()
    up = await raw(replying(b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n"
                            % (name, len(packed)), packed[:10], packed[10:]))
    resp = await pool.post(up.url, "/x", b"{}", {}, 5)
    assert await body_of(resp) == body
    resp.release()


async def test_a_body_delimited_by_the_close_is_read_whole_and_not_pooled(
    raw: Callable[[Answer], Awaitable[RawUpstream]], pool: Pool
) -> None:
    up = await raw(replying(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b"part one, ",
                            b"part two", close=True))
    for _ in range(2):
        resp = await pool.post(up.url, "/x", b"{}", {}, 5)
        assert await body_of(resp) == b"part one, part two"
        resp.release()
    assert up.connections == 2


async def test_an_answer_cut_short_is_an_error_after_what_arrived(
    raw: Callable[[Answer], Awaitable[RawUpstream]], pool: Pool
) -> None:
    up = await raw(replying(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", b"only this",
                            close=True))
    resp = await pool.post(up.url, "/x", b"{}", {}, 5)
    assert await resp.readany() == b"only this"
    with pytest.raises(H1Error):
        await resp.readany()
    resp.release()


async def test_a_stalled_upstream_times_out_before_and_after_its_head(
    raw: Callable[[Answer], Awaitable[RawUpstream]], pool: Pool
) -> None:
    silent = await raw(replying(b""))
    with pytest.raises(TimeoutError):
        await pool.post(silent.url, "/x", b"{}", {}, 0.2)
    stalls = await raw(replying(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
    resp = await pool.post(stalls.url, "/x", b"{}", {}, 0.3)
    assert await resp.readany() == b"abc"
    with pytest.raises(TimeoutError):
        await resp.readany()
    resp.release()


_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class _Socket:
    closed = False

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _Upstream:
    """One upstream connection on a hand-moved clock, its answers asked for by hand."""

    def __init__(self) -> None:
        self.clock, self.sock = ManualTimers(), _Socket()
        self.proto = Proto(Pool(connect_timeout_s=1), target("http://up/v1"))
        self.proto.connection_made(self.sock)  # type: ignore[arg-type]
        self.loop = cast(asyncio.AbstractEventLoop, self.clock)

    def ask(self, deadline: float) -> Response:
        """A request sent: its answer, due by `deadline`."""
        resp = self.proto.resp = Response(self.proto, self.loop)
        self.proto.watch(self.loop, deadline)
        return resp


async def test_each_answer_on_a_kept_alive_connection_has_its_own_deadline() -> None:
    up = _Upstream()
    first = up.ask(10.0)
    up.clock.advance(1.0)
    up.proto.data_received(_OK)  # in time
    assert await first.readany() == b"ok"
    first.release()
    up.clock.advance(5.0)
    second = up.ask(15.0)  # the first answer's timer is still pending: no second one is made
    assert up.clock.pending == 1
    up.clock.advance(12.0)  # past the first deadline: the second answer still has 3 s
    assert not up.sock.closed and second._exc is None
    up.clock.advance(15.0)
    assert up.sock.closed
    with pytest.raises(TimeoutError):
        await second.readany()


async def test_a_sooner_deadline_moves_the_connections_timer_and_an_ended_answer_never_times_out(
) -> None:
    up = _Upstream()
    resp = up.ask(30.0)
    up.proto.watch(up.loop, 2.0)  # a shorter timeout for this answer
    up.clock.advance(2.0)
    assert up.sock.closed and isinstance(resp._exc, TimeoutError)

    up = _Upstream()
    resp = up.ask(2.0)
    up.proto.data_received(_OK)
    up.clock.advance(60.0)
    assert not up.sock.closed and resp._exc is None and await resp.readany() == b"ok"
    assert up.clock.pending == 0


async def test_a_kept_alive_connection_the_upstream_closed_is_replaced(
    raw: Callable[[Answer], Awaitable[RawUpstream]], pool: Pool
) -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Says keep-alive, then closes right after the answer: the next request must not fail.
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    up = await raw(once)
    for _ in range(3):
        resp = await pool.post(up.url, "/x", b"{}", {}, 5)
        assert await body_of(resp) == b"ok"
        resp.release()
        await asyncio.sleep(0.05)
    assert up.connections == 3


async def test_nonsense_is_an_error_and_a_refused_connection_a_connect_error(
    raw: Callable[[Answer], Awaitable[RawUpstream]], pool: Pool
) -> None:
    up = await raw(replying(b"SMTP ready\r\n\r\n"))
    with pytest.raises(H1Error):
        await pool.post(up.url, "/x", b"{}", {}, 5)
    with pytest.raises(ConnectError):
        await pool.post(f"http://127.0.0.1:{dead_port()}/v1", "/x", b"{}", {}, 5)


async def test_a_header_that_would_split_the_request_is_never_sent(
    raw: Callable[[Answer], Awaitable[RawUpstream]], pool: Pool
) -> None:
    up = await raw(replying(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
    with pytest.raises(H1Error):
        await pool.post(up.url, "/x", b"{}", {"Authorization": "Bearer k\r\nX-Evil: 1"}, 5)
    assert up.requests == []


async def test_credentials_in_the_url_are_sent_as_basic_auth_unless_the_request_has_its_own(
    raw: Callable[[Answer], Awaitable[RawUpstream]], pool: Pool
) -> None:
    up = await raw(replying(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
    with_user = up.url.replace("http://", "http://us%40er:p%3Ass@")
    for headers in ({}, {"Authorization": "Bearer provider-key"}):
        resp = await pool.post(with_user, "/x", b"{}", headers, 5)
        resp.release()
    # "us@er:p:ss", the URL's credentials unquoted, in base64; the request's own header wins.
    assert b"\r\nAuthorization: Basic dXNAZXI6cDpzcw==\r\n" in up.requests[0]
    assert b"Basic" not in up.requests[1] and b"Bearer provider-key" in up.requests[1]
    assert b"us%40er" not in up.requests[0]  # never in the request line or Host


def remote_route(url: str) -> Serving:
    model = Model(name="m", source=RemoteSource(base_url=url, model="m"))
    return Serving(model, (Upstream("remote:m", url),))


@pytest.mark.parametrize("port", ["99999", "abc"])
async def test_an_upstream_whose_port_does_not_parse_is_a_502_not_a_fault(port: str) -> None:
    """An entry stored before the catalog refused such URLs (or a replica's endpoint): clients
    get the upstream's 502, never a 500."""
    client = Transport(timeout_s=0.3)
    await client.start()
    try:
        route = Serving(Model(name="m", source=RemoteSource(base_url="http://127.0.0.1/v1")),
                        (Upstream("remote:m", f"http://127.0.0.1:{port}/v1"),))
        with pytest.raises(UpstreamError) as refused:
            await connect(client, route, "/chat/completions", b"{}")
        assert refused.value.status == 502
    finally:
        await client.close()


async def test_the_transport_maps_the_clients_errors_once(
    raw: Callable[[Answer], Awaitable[RawUpstream]]
) -> None:
    client = Transport(timeout_s=0.3)
    await client.start()
    try:
        broken = await raw(replying(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{", close=True))
        conn = await connect(client, remote_route(broken.url), "/chat/completions", b"{}")
        with pytest.raises(UpstreamError, match="failed"):
            await conn.whole()
        conn.release()
        stalls = await raw(replying(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"))
        conn = await connect(client, remote_route(stalls.url), "/chat/completions", b"{}")
        with pytest.raises(UpstreamTimeout):
            await conn.whole()
        conn.release()
    finally:
        await client.close()
