"""The data plane's hot routes on llmgw's own connections, over raw sockets: their transport only
(what they answer is the handler's, tested in `test_handler`): answers in order on one connection
whichever side serves them, pipelining, what is handed to aiohttp, the body's bound, and the
deadlines on a body."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import cast
from urllib.parse import urlsplit

import orjson
import pytest
from aiohttp import web

from llmgw.api import hot_edge
from llmgw.api.edge import Connections, EdgeLimits
from llmgw.core.tracing import NOOP_TRACER
from llmgw.core.types import Model, ProviderApi
from llmgw.gateway.call import Exchange, Reply, Stream, UpstreamCall
from llmgw.gateway.h1_connection import Response
from llmgw.gateway.service import Gateway
from llmgw.gateway.transport import Connection
from llmgw.gateway.usage import UsageTap
from llmgw.store.store import Store
from tests.factories import remote_model
from tests.fakes.provider import USAGE, WORDS, FakeProvider, GatewayRig
from tests.fakes.timers import ManualTimers

CHAT = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


@asynccontextmanager
async def rig(tmp_path: Path, model: Model | None = None) -> AsyncIterator[GatewayRig]:
    """The data plane serving model `m` (a local model unless `model` is given) from a fake
    provider, as `server run` serves it."""
    provider = await FakeProvider().start()
    r = await GatewayRig(provider, Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}"),
                         model=model).start()
    try:
        yield r
    finally:
        await r.close()
        await provider.close()


def post(path: str, key: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: a", f"Authorization: Bearer {key}",
            "Content-Type: application/json", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def get(path: str, key: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {key}\r\n\r\n".encode()


async def connect(r: GatewayRig) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = urlsplit(r.url)
    assert url.hostname is not None and url.port is not None
    return await asyncio.open_connection(url.hostname, url.port)


async def response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response (Content-Length or chunked) from a kept-alive connection."""
    async with asyncio.timeout(5):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in head[1:] if line)}
        if "content-length" in headers:
            return int(head[0].split()[1]), headers, await reader.readexactly(
                int(headers["content-length"]))
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readexactly(2)
        return int(head[0].split()[1]), headers, body


async def test_hot_and_other_requests_share_a_connection_and_answer_in_order(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        reader, writer = await connect(r)
        try:
            writer.write(post("/v1/chat/completions", r.plaintext, CHAT))
            status, headers, body = await response(reader)
            assert status == 200 and orjson.loads(body)["object"] == "chat.completion"
            assert headers["server"] == "llmgw" and headers["x-request-id"].startswith("req-")
            # Then a route aiohttp answers, then a hot one again, on the same connection.
            writer.write(get("/v1/models", r.plaintext))
            status, _, body = await response(reader)
            assert status == 200 and orjson.loads(body)["data"][0]["id"] == "m"
            writer.write(post("/v1/chat/completions", r.plaintext, CHAT))
            status, _, body = await response(reader)
            assert status == 200 and orjson.loads(body)["object"] == "chat.completion"
        finally:
            writer.close()


async def test_pipelined_requests_are_answered_in_the_order_sent(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        reader, writer = await connect(r)
        try:
            stream = orjson.dumps({**orjson.loads(CHAT), "stream": True})
            writer.write(post("/v1/chat/completions", r.plaintext, CHAT, "X-Request-Id: one")
                         + post("/v1/chat/completions", r.plaintext, stream, "X-Request-Id: two")
                         + get("/health", r.plaintext))
            first, second, third = [await response(reader) for _ in range(3)]
            assert first[1]["x-request-id"] == "one" and first[1]["content-type"] == "application/json"
            assert second[1]["x-request-id"] == "two" and second[2].endswith(b"data: [DONE]\n\n")
            assert third[0] == 200 and orjson.loads(third[2]) == {"status": "ok"}
        finally:
            writer.close()


async def test_a_hot_request_pipelined_before_bytes_the_parser_refuses_is_answered_first(
        tmp_path: Path) -> None:
    """The refusal waits for the answer owed before it: the client reads the completion, then
    the 400, then the connection's end."""
    async with rig(tmp_path) as r:
        reader, writer = await connect(r)
        try:
            writer.write(post("/v1/chat/completions", r.plaintext, CHAT)
                         + b"GE(T / HTTP/1.1\r\nHost: a\r\n\r\n")
            status, _, body = await response(reader)
            assert status == 200 and orjson.loads(body)["object"] == "chat.completion"
            status, headers, body = await response(reader)
            assert status == 400 and orjson.loads(body)["error"]["code"] == "invalid_request"
            async with asyncio.timeout(5):
                assert await reader.read() == b""
        finally:
            writer.close()


async def test_streams_on_one_connection_each_arrive_whole_and_each_is_counted(
    tmp_path: Path,
) -> None:
    # Most of these arrive whole from the upstream before they are written (then in one piece,
    # closed without a turn of the loop); whichever way each goes, the client gets every event
    # and the usage every token.
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    provider = await FakeProvider().start()
    r = await GatewayRig(provider, store).start()
    try:
        reader, writer = await connect(r)
        try:
            stream = orjson.dumps({**orjson.loads(CHAT), "stream": True})
            for _ in range(5):
                writer.write(post("/v1/chat/completions", r.plaintext, stream))
                status, headers, body = await response(reader)
                assert status == 200 and headers["content-type"] == "text/event-stream"
                events = [orjson.loads(e[6:]) for e in body.split(b"\n\n")
                          if e.startswith(b"data: {")]
                text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
                assert text == "".join(WORDS) and body.endswith(b"data: [DONE]\n\n")
        finally:
            writer.close()
        assert r.limiter is not None and r.meter is not None
        await r.limiter.sync(r.meter.flush)
    finally:
        await r.close()
        await provider.close()
    [row] = store.usage.usage()
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (
        5, 5 * USAGE["prompt_tokens"], 5 * USAGE["completion_tokens"])


async def test_answers_leave_nothing_for_the_cyclic_collector(tmp_path: Path) -> None:
    # The server collects cyclic garbage rarely (`server run` freezes the heap and raises the
    # thresholds), and each pass stalls every request: a request's objects must be freed by
    # reference counting alone.
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds is kept in gc.garbage to look at
    try:
        # A provider speaking chat completions only: Messages and Responses are translated.
        async with rig(tmp_path, remote_model("m", api=ProviderApi.OPENAI)) as r:
            reader, writer = await connect(r)
            try:
                chat = orjson.loads(CHAT)
                messages = {**chat, "max_tokens": 64}
                responses = {"model": "m", "input": "hi"}
                key = r.plaintext
                asked = [
                    (key, "/v1/chat/completions", chat, 200),
                    (key, "/v1/chat/completions", {**chat, "model": "nope"}, 404),
                    ("sk-wrong", "/v1/chat/completions", chat, 401),
                    (key, "/v1/messages", messages, 200),  # translated to chat completions
                    (key, "/v1/responses", responses, 200),  # likewise
                ]
                for key, path, body, status in [
                        *asked, *((k, p, {**b, "stream": True}, s) for k, p, b, s in asked)] * 3:
                    writer.write(post(path, key, orjson.dumps(body)))
                    assert (await response(reader))[0] == status
            finally:
                writer.close()
        gc.collect()
        kinds = {type(o) for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not kinds & {Stream, Reply, Exchange, UpstreamCall, Connection, Response, UsageTap}


@pytest.mark.parametrize(("path", "shape"), [
    ("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic"),
])
async def test_a_body_past_the_bound_is_a_413_in_the_callers_dialect(
        tmp_path: Path, path: str, shape: str) -> None:
    async with rig(tmp_path) as r:
        big = b'{"model": "m", "pad": "' + b"x" * (1024 * 1024 + 10) + b'"}'
        reader, writer = await connect(r)
        try:
            writer.write(post(path, r.plaintext, big))
            status, _, body = await response(reader)
        finally:
            writer.close()
    assert status == 413
    error = orjson.loads(body)
    assert (error["type"] == "error") if shape == "anthropic" else ("param" in error["error"])
    assert b"xxxx" not in body


async def test_a_chunked_or_expecting_request_is_answered_through_aiohttp(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        reader, writer = await connect(r)
        try:
            head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "
                    f"{r.plaintext}\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
            writer.write(head + b"%x\r\n%s\r\n" % (len(CHAT[:10]), CHAT[:10])
                         + b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT[10:]), CHAT[10:]))
            status, _, body = await response(reader)
            assert status == 200 and orjson.loads(body)["object"] == "chat.completion"
            writer.write(post("/v1/chat/completions", r.plaintext, CHAT, "Expect: 100-continue"))
            interim = await reader.readuntil(b"\r\n\r\n")
            assert interim.startswith(b"HTTP/1.1 100")
            status, _, body = await response(reader)
            assert status == 200 and orjson.loads(body)["object"] == "chat.completion"
        finally:
            writer.close()


async def test_a_body_that_stops_coming_closes_the_connection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hot_edge, "BODY_TIMEOUT_S", 0.3)
    async with rig(tmp_path) as r:
        reader, writer = await connect(r)
        try:
            writer.write(post("/v1/chat/completions", r.plaintext, CHAT)[:-5])
            async with asyncio.timeout(5):
                assert await reader.read() == b""
        finally:
            writer.close()


class _Client:
    """The client side of a connection, as the edge's protocol sees it."""

    closed = False

    def __init__(self) -> None:
        self.written = b""

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("10.0.0.7", 40000) if name == "peername" else default

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class _Server:
    def connection_made(self, *_: object) -> None:
        pass

    def connection_lost(self, *_: object) -> None:
        pass


def _connection(clock: ManualTimers) -> tuple[hot_edge.HotConnection, _Client]:
    """A hot connection on a hand-moved clock (header deadline 10 s, keep-alive 75 s)."""
    conn = hot_edge.HotConnection(
        cast(web.Server, _Server()), cast(Gateway, SimpleNamespace(tracer=NOOP_TRACER)),
        lambda: cast(web.RequestHandler, None), Connections(0), EdgeLimits(), 1 << 20)
    conn._loop = cast(asyncio.AbstractEventLoop, clock)
    client = _Client()
    conn.connection_made(cast(asyncio.Transport, client))
    return conn, client


async def test_a_head_sent_a_little_at_a_time_keeps_the_deadline_of_its_first_bytes() -> None:
    clock = ManualTimers()
    conn, client = _connection(clock)
    clock.advance(5.0)
    conn.data_received(b"POST /v1/chat/completions HTTP/1.1\r\n")  # the deadline: 15 s
    for at in (8.0, 11.0, 14.0):
        clock.advance(at)
        conn.data_received(b"X-Slow: a\r\n")  # each read would be its own deadline: never cut
        assert not client.closed
    clock.advance(15.0)
    assert client.closed


async def test_a_body_that_comes_after_its_head_has_the_body_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hot_edge, "BODY_TIMEOUT_S", 30.0)
    clock = ManualTimers()
    conn, client = _connection(clock)
    head = post("/v1/chat/completions", "sk-x", CHAT)[:-len(CHAT)]
    conn.data_received(head)  # a whole head and no body: 30 s for the body from here
    clock.advance(29.0)
    conn.data_received(CHAT[:5])
    assert not client.closed
    clock.advance(30.0)
    assert client.closed
