"""A misbehaving OpenAI-compatible provider, and llmgw's data plane in front of it.

`FakeProvider` is a real aiohttp server answering `/v1/chat/completions` the way real providers
misbehave: compressing whatever the client asked for, lying about usage, answering errors with
HTML or its own headers, stalling. Offered tools, it calls the first one; given a tool's result,
it quotes it. `GatewayRig` serves llmgw's real data-plane routes (error middleware, Gateway,
limiter, usage meter) the way `server run` does, routing model `m` to it.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anthropic
import openai
import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from llmgw.api import data_plane
from llmgw.api.appkeys import GATEWAY
from llmgw.api.endpoints import bind
from llmgw.api.errors import openai_errors
from llmgw.core.clock import SystemClock
from llmgw.core.tracing import NOOP_TRACER, Tracer
from llmgw.core.types import ApiKey, Limits, LocalSource, Model, Profile
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.cache.service import ResponseCache
from llmgw.gateway.limits import Limiter
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.queue import ColdQueue
from llmgw.gateway.service import Gateway
from llmgw.gateway.shared_limits import SharedLimits
from llmgw.gateway.snapshot import Refresher, Snapshot
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.gateway.usage import UsageMeter
from llmgw.guard.enforcement import Guard
from llmgw.server.run import app_runner
from llmgw.store.store import Store
from tests.factories import KEY_SECRET, user_key

ANSWER = "The sea is wide."
WORDS = ["The", " sea", " is", " wide", "."]
USAGE = {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}
TOOL_ARGUMENTS = {"city": "Paris", "unit": "celsius"}  # what the first offered tool is called with
TOOL_RESULT_PREFIX = "The tool said:"  # how an answer to a tool's result starts


def _said(content: Any) -> str:
    """A tool message's content as text: a string, or its text parts joined."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else ""


def _words(text: str) -> list[str]:
    """Text in one-word pieces, spaces kept in front as tokenizers do."""
    head, *rest = text.split(" ")
    return [p for p in [head, *(" " + w for w in rest)] if p]


@dataclass(frozen=True)
class Answer:
    """What a request is answered with: text in pieces, or a call of `tool` with its arguments in
    pieces."""

    pieces: list[str]
    tool: str | None = None
    call_id: str = "call_fake_1"

    @classmethod
    def to(cls, body: Any) -> Answer:
        """The answer to a chat request: a call of the first tool offered, unless the last message
        is a tool's result (then a quote of it) or tool_choice is "none"; else the fixed text."""
        body = body if isinstance(body, dict) else {}
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        if last.get("role") == "tool":
            results: list[str] = []  # every result of the last turn's calls, in order
            for m in reversed(messages):
                if not (isinstance(m, dict) and m.get("role") == "tool"):
                    break
                results.insert(0, _said(m.get("content")))
            return cls(_words(f"{TOOL_RESULT_PREFIX} {' '.join(results)}"))
        tools = body.get("tools") if isinstance(body.get("tools"), list) else []
        first = tools[0].get("function") if tools and isinstance(tools[0], dict) else None
        if isinstance(first, dict) and body.get("tool_choice") != "none":
            args = orjson.dumps(TOOL_ARGUMENTS).decode()
            # In pieces that split keys and values, as providers stream arguments.
            return cls([args[i:i + 7] for i in range(0, len(args), 7)], tool=str(first.get("name")))
        return cls(list(WORDS))


def compressor(encoding: str) -> Any:
    """A streaming compressor for `gzip` or `deflate` (zlib-wrapped, as RFC 9110 says)."""
    return zlib.compressobj(wbits=31 if encoding == "gzip" else 15)


@dataclass
class FakeProvider:
    """Answers chat completions whole or streamed; every knob is a way real providers misbehave."""

    compress: str | None = None  # "gzip", "deflate", or any label: sent whatever was asked
    usage: bytes | None = orjson.dumps(USAGE)  # the usage object as written; None leaves it out
    status: int = 200
    error_body: bytes = b""
    error_headers: dict[str, str] = field(default_factory=dict)
    stall: bool = False  # start (headers for a stream), then never finish
    # Statuses for the next requests, one each (the error body and headers as for `status`).
    fail_next: list[int] = field(default_factory=list)
    cut_after: int | None = None  # a stream: send this many events, then drop the connection
    body: bytes | None = None  # a whole answer to send instead of the usual one
    # A 200 that is no API's answer: this HTML page, whatever was asked, on every path (a login
    # portal in front of the provider, a web UI at the wrong port).
    page: bytes | None = None
    accept_encodings: list[str | None] = field(default_factory=list)
    arrived: asyncio.Queue[None] = field(default_factory=asyncio.Queue)  # one per request
    left: asyncio.Queue[None] = field(default_factory=asyncio.Queue)  # closed before it finished
    requests: list[dict[str, Any]] = field(default_factory=list)  # every body, in order of arrival
    embedded: list[Any] = field(default_factory=list)  # every embeddings input, in order
    traceparents: list[str | None] = field(default_factory=list)  # each request's W3C header
    server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/v1"))

    async def start(self) -> FakeProvider:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_post("/v1/messages", self.portal)
        self.server = TestServer(app)  # handler_cancellation on: a closed connection cancels chat
        await self.server.start_server()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    def whole(self, answer: Answer | None = None) -> bytes:
        answer = answer or Answer(list(WORDS))
        message: dict[str, Any] = {"role": "assistant", "content": "".join(answer.pieces)}
        if answer.tool is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": answer.call_id, "type": "function",
                "function": {"name": answer.tool, "arguments": "".join(answer.pieces)}}]}
        head = orjson.dumps({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "stop" if answer.tool is None else "tool_calls"}],
        })
        return head if self.usage is None else head[:-1] + b',"usage":' + self.usage + b"}"

    def events(self, answer: Answer | None = None, include_usage: bool = False) -> list[bytes]:
        """The stream's events. Usage rides on the last choice chunk, as some providers send it,
        unless the client asked for `stream_options.include_usage`: then it comes in a chunk of
        its own with no choices, as OpenAI sends it."""
        answer = answer or Answer(list(WORDS))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return b"data: " + orjson.dumps({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }) + b"\n\n"

        if answer.tool is None:
            first = chunk({"role": "assistant", "content": ""})
            deltas = [chunk({"content": p}) for p in answer.pieces]
        else:
            first = chunk({"role": "assistant", "content": None, "tool_calls": [{
                "index": 0, "id": answer.call_id, "type": "function",
                "function": {"name": answer.tool, "arguments": ""}}]})
            deltas = [chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
                      for p in answer.pieces]
        last = chunk({}, "stop" if answer.tool is None else "tool_calls")
        tail = []
        if self.usage is not None and include_usage:
            tail.append(b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,'
                        b'"model":"m","choices":[],"usage":' + self.usage + b"}\n\n")
        elif self.usage is not None:
            last = last[: -len(b"}\n\n")] + b',"usage":' + self.usage + b"}\n\n"
        return [first, *deltas, last, *tail, b"data: [DONE]\n\n"]

    async def embeddings(self, request: web.Request) -> web.Response:
        """A bag of words as the embedding: texts with the same words, in any order or case,
        are the same vector; each word more or less moves it away."""
        body = orjson.loads(await request.read())
        self.embedded.append(body["input"])
        vector = [0.0] * 64
        for word in re.findall(r"[a-z0-9]+", str(body["input"]).lower()):
            vector[zlib.crc32(word.encode()) % 64] += 1.0
        return web.json_response({"object": "list", "model": body.get("model"), "data": [
            {"object": "embedding", "index": 0, "embedding": vector}]})

    async def portal(self, request: web.Request) -> web.Response:
        """The `page`, where the provider serves nothing else."""
        self.requests.append(orjson.loads(await request.read()))
        if self.page is None:
            raise web.HTTPNotFound()
        return web.Response(body=self.page, content_type="text/html")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        if self.page is not None:
            return await self.portal(request)
        body = orjson.loads(await request.read())
        self.requests.append(body)
        self.traceparents.append(request.headers.get("traceparent"))
        answer = Answer.to(body)
        options = body.get("stream_options") if isinstance(body, dict) else None
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        self.accept_encodings.append(request.headers.get("Accept-Encoding"))
        self.arrived.put_nowait(None)
        finished = False
        try:
            status = self.fail_next.pop(0) if self.fail_next else self.status
            if status != 200:
                finished = True
                return web.Response(status=status, body=self.error_body,
                                    headers=self.error_headers)
            if body.get("stream") is not True:
                if self.stall:
                    await asyncio.Event().wait()  # still "generating"; only a cancel ends it
                finished = True
                data = self.whole(answer) if self.body is None else self.body
                if self.compress in ("gzip", "deflate"):
                    pack = compressor(self.compress)
                    data = pack.compress(data) + pack.flush()
                headers = {"Content-Type": "application/json"}
                if self.compress:
                    headers["Content-Encoding"] = self.compress
                return web.Response(body=data, headers=headers)
            headers = {"Content-Type": "text/event-stream"}
            if self.compress:
                headers["Content-Encoding"] = self.compress
            resp = web.StreamResponse(headers=headers)
            await resp.prepare(request)
            if self.stall:
                await asyncio.Event().wait()
            pack = compressor(self.compress) if self.compress in ("gzip", "deflate") else None
            for n, event in enumerate(self.events(answer, include_usage)):
                if n == self.cut_after:
                    assert request.transport is not None
                    request.transport.close()  # mid-stream, with no end of the chunked body
                    finished = True
                    return resp
                # Each event flushed on its own, as a provider streaming compressed SSE does.
                await resp.write(event if pack is None
                                 else pack.compress(event) + pack.flush(zlib.Z_SYNC_FLUSH))
            if pack is not None:
                await resp.write(pack.flush())
            finished = True
            return resp
        finally:
            if not finished:
                self.left.put_nowait(None)


@dataclass
class GatewayRig:
    """llmgw's data plane serving model `m` from `provider` to one user key."""

    provider: FakeProvider
    store: Store
    limits: Limits = field(default_factory=Limits)
    key: ApiKey | None = None
    plaintext: str = ""
    limiter: Limiter | None = None
    meter: UsageMeter | None = None
    url: str = ""
    _runner: web.AppRunner | None = None
    _client: Transport | None = None
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    # Model `m` as the catalog has it (a local model by default; a remote one names its dialect),
    # the headers its upstream gets, and the guard the gateway judges with.
    model: Model | None = None
    upstream_headers: dict[str, str] = field(default_factory=dict)
    guard: Guard | None = None
    # The request queue, for routes with no upstream; the refresher, to swap snapshots in.
    queue: ColdQueue | None = None
    refresher: Refresher | None = None
    metrics: Metrics | None = None
    timeout_s: float = 30.0  # the upstream timeout
    shared: SharedLimits | None = None  # the install's Redis, for the limits
    gateway: Gateway | None = None
    tracer: Tracer = NOOP_TRACER
    cache: ResponseCache | None = None  # the response cache, when the test turns it on
    # More user keys beside `key`, each (plaintext, key) as `user_key` makes them.
    others: list[tuple[str, ApiKey]] = field(default_factory=list)

    async def start(self) -> GatewayRig:
        self.plaintext, key = user_key()
        self.key = key.model_copy(update={"limits": self.limits})
        self._client = Transport(timeout_s=self.timeout_s)
        await self._client.start()
        refresher = self.refresher = Refresher(self.store, KEY_SECRET)
        model = self.model or Model(name="m", source=LocalSource(path="/m.gguf"),
                                    profiles=[Profile(name="cpu")])
        route = Serving(model, (Upstream("replica-1", self.provider.url, dict(self.upstream_headers)),))
        keys = [self.key, *(k for _, k in self.others)]
        refresher.current = Snapshot(1, KeyCache(KEY_SECRET, keys), RoutingTable({"m": route}),
                                     caching=model.cache is not None)
        self.limiter = Limiter(self.store, self.now, shared=self.shared)
        self.meter = UsageMeter(self.store, self.now)
        gateway = self.gateway = Gateway(refresher, self._client, SystemClock(), self.guard,
                                         self.limiter, self.meter, self.metrics, queue=self.queue,
                                         tracer=self.tracer, cache=self.cache)
        app = web.Application(middlewares=[openai_errors])
        app[GATEWAY] = gateway
        app.add_routes(bind(data_plane.ENDPOINTS))
        self._runner = app_runner(app)  # served as `server run` serves
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.close()

    def openai(self) -> openai.AsyncOpenAI:
        """The official client, with this rig's key and no retries of its own."""
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=self.plaintext, max_retries=0,
                                  timeout=30)

    def anthropic(self) -> anthropic.AsyncAnthropic:
        """Anthropic's official client, with this rig's key and no retries of its own."""
        return anthropic.AsyncAnthropic(base_url=self.url, api_key=self.plaintext, max_retries=0,
                                        timeout=30)
