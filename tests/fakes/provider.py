"""A misbehaving OpenAI-compatible provider, and llmgw's data plane in front of it.

`FakeProvider` is a real aiohttp server answering `/v1/chat/completions` the way real providers
misbehave: compressing whatever the client asked for, lying about usage, answering errors with
HTML or its own headers, stalling. `GatewayRig` serves llmgw's real data-plane routes (error
middleware, Gateway, limiter, usage meter) the way `server run` does, routing model `m` to it.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import openai
import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from llmgw.api.appkeys import GATEWAY
from llmgw.api.data_plane import routes
from llmgw.api.errors import openai_errors
from llmgw.core.clock import SystemClock
from llmgw.core.types import ApiKey, Limits, LocalSource, Model, Profile
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.limits import Limiter
from llmgw.gateway.transport import Transport
from llmgw.gateway.routing import Route, RoutingTable, Upstream
from llmgw.gateway.service import Gateway
from llmgw.gateway.snapshot import Refresher, Snapshot
from llmgw.gateway.usage import UsageMeter
from llmgw.server.run import app_runner
from llmgw.store.store import Store
from tests.factories import KEY_SECRET, user_key

ANSWER = "The sea is wide."
WORDS = ["The", " sea", " is", " wide", "."]
USAGE = {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}


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
    body: bytes | None = None  # a whole answer to send instead of the usual one
    accept_encodings: list[str | None] = field(default_factory=list)
    arrived: asyncio.Queue[None] = field(default_factory=asyncio.Queue)  # one per request
    left: asyncio.Queue[None] = field(default_factory=asyncio.Queue)  # closed before it finished
    server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/v1"))

    async def start(self) -> FakeProvider:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.server = TestServer(app)  # handler_cancellation on: a closed connection cancels chat
        await self.server.start_server()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    def whole(self) -> bytes:
        head = orjson.dumps({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": ANSWER}}],
        })
        return head if self.usage is None else head[:-1] + b',"usage":' + self.usage + b"}"

    def events(self) -> list[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return b"data: " + orjson.dumps({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }) + b"\n\n"

        last = chunk({}, "stop")
        if self.usage is not None:
            last = last[: -len(b"}\n\n")] + b',"usage":' + self.usage + b"}\n\n"
        return [chunk({"role": "assistant", "content": ""}),
                *(chunk({"content": w}) for w in WORDS), last, b"data: [DONE]\n\n"]

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.accept_encodings.append(request.headers.get("Accept-Encoding"))
        self.arrived.put_nowait(None)
        finished = False
        try:
            if self.status != 200:
                finished = True
                return web.Response(status=self.status, body=self.error_body,
                                    headers=self.error_headers)
            if body.get("stream") is not True:
                if self.stall:
                    await asyncio.Event().wait()  # still "generating"; only a cancel ends it
                finished = True
                data = self.whole() if self.body is None else self.body
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
            for event in self.events():
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

    async def start(self) -> GatewayRig:
        self.plaintext, key = user_key()
        self.key = key.model_copy(update={"limits": self.limits})
        self._client = Transport(timeout_s=30)
        await self._client.start()
        refresher = Refresher(self.store, KEY_SECRET)
        model = Model(name="m", source=LocalSource(path="/m.gguf"), profiles=[Profile(name="cpu")])
        route = Route(model, (Upstream("replica-1", self.provider.url),))
        refresher.current = Snapshot(1, KeyCache(KEY_SECRET, [self.key]), RoutingTable({"m": route}))
        self.limiter = Limiter(self.store, self.now)
        self.meter = UsageMeter(self.store, self.now)
        gateway = Gateway(refresher, self._client, SystemClock(), None, self.limiter, self.meter)
        app = web.Application(middlewares=[openai_errors])
        app[GATEWAY] = gateway
        app.add_routes(routes())
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
