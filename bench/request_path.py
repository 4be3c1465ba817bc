"""What llmgw's request path costs in Python, with the network taken out.

Drives requests one at a time (concurrency 1) through the data plane as `server run` serves
them: the edge's connection code (`api/hot_edge.py`), the gateway (auth, the body checks, a key
with every kind of limit, usage, metrics) and the upstream client (`gateway/h1.py`), on in-memory
sockets: the client's next request and the upstream's canned answer (the bench's nginx bodies)
each arrive on the loop's next turn, as from a socket. No socket is read or written, so what it
prints is Python's and the event loop's share of `bench/run.sh`'s CPU column, and it moves less
with the machine's load than anything timed over sockets.

    .venv/bin/python bench/request_path.py [--requests N] [--rounds R]

Prints, for a whole JSON answer and a stream, the CPU µs per request of each round and their
minimum, and the objects each request left for the cyclic garbage collector (0: everything was
freed by reference counting; `server run` collects rarely, and each pass stalls every request).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile
import time
from typing import Any

import uvloop

from llmgw.api.edge import Connections, EdgeLimits
from llmgw.api.hot_edge import HotConnection
from llmgw.core.clock import SystemClock
from llmgw.core.ids import hash_key, key_prefix, new_api_key
from llmgw.core.types import ApiKey, KeyScope, Limits, LocalSource, Model, Profile
from llmgw.gateway import h1, h1_connection
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.limits import Limiter
from llmgw.gateway.metrics import Metrics
from llmgw.gateway.service import Gateway
from llmgw.gateway.snapshot import Refresher, Snapshot
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.gateway.usage import UsageMeter
from llmgw.store.store import Store

SECRET = b"\x01" * 32
UPSTREAM = "http://127.0.0.1:9/v1"  # never dialled: its one connection is made here
_CREATED = b'"created":1700000000,"model":"fake"'
JSON_BODY = (b'{"id":"chatcmpl-bench","object":"chat.completion",' + _CREATED + b',"choices":[{"index"'
             b':0,"message":{"role":"assistant","content":"Hello! This is a fixed answer from the '
             b'benchmark upstream."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_'
             b'tokens":9,"completion_tokens":20,"total_tokens":29}}')


def _event(delta: bytes, finish: bytes) -> bytes:
    return (b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk",' + _CREATED
            + b',"choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}\n\n'
            % (delta, finish))


SSE_BODY = (_event(b'{"role":"assistant","content":""}', b"null")
            + b"".join(_event(b'{"content":"tok%d "}' % i, b"null") for i in range(2, 20))
            + _event(b"{}", b'"stop"')
            + b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk",' + _CREATED
            + b',"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":20,"total_tokens"'
            b':29}}\n\ndata: [DONE]\n\n')


def _answer(content_type: bytes, body: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Tue, 01 Dec 2026 12:00:00 GMT\r\n"
            b"Content-Type: %s\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n%s"
            % (content_type, len(body), body))


class _Socket:
    """One end of an in-memory connection: what is written is answered on the loop's next turn."""

    def __init__(self, answer: Any, closed: Any = None) -> None:
        self.answer = answer  # called with what was written
        self.closed = closed  # called if it is closed

    def write(self, data: bytes) -> None:
        self.answer(data)

    def writelines(self, parts: list[bytes]) -> None:
        self.answer(b"".join(parts))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        if self.closed is not None:
            self.closed()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("10.0.0.7", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Server:
    def connection_made(self, *_: object) -> None:
        pass

    def connection_lost(self, *_: object) -> None:
        pass


async def _round(stream: bool, requests: int) -> tuple[float, float]:
    """CPU µs per request, and objects left for the cyclic collector per request."""
    loop = asyncio.get_running_loop()
    plaintext = new_api_key()
    key = ApiKey(id="key-bench", name="bench", prefix=key_prefix(plaintext), last4=plaintext[-4:],
                 hash=hash_key(SECRET, plaintext), scope=KeyScope.USER,
                 # Every kind of limit, as bench/run.sh's key, high enough never to refuse.
                 limits=Limits(rpm=10**8, tpm=10**12, concurrent=10**5, tokens_per_day=10**15))
    name = "fake-sse" if stream else "fake-json"
    model = Model(name=name, source=LocalSource(path="/m.gguf"), profiles=[Profile(name="cpu")])
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{tmp}/llmgw.db")
        refresher = Refresher(store, SECRET)
        refresher.current = Snapshot(1, KeyCache(SECRET, [key]), RoutingTable(
            {name: Serving(model, (Upstream("replica-1", UPSTREAM, {}),))}))
        defaults = Limits()
        limiter = Limiter(store, SystemClock().now, lambda: defaults, lambda: refresher.current.keys)
        transport = Transport(timeout_s=600)
        await transport.start()
        gateway = Gateway(refresher, transport, SystemClock(), None, limiter,
                          UsageMeter(store, SystemClock().now),
                          Metrics(lambda: refresher.current.table))
        # The upstream: one pooled connection answering every request with the canned answer.
        answer = _answer(b"text/event-stream", SSE_BODY) if stream \
            else _answer(b"application/json", JSON_BODY)
        upstream = h1_connection.Proto(transport._pool, h1.target(UPSTREAM))  # type: ignore[union-attr]
        upstream.connection_made(_Socket(lambda _: loop.call_soon(upstream.data_received, answer)))
        transport._pool._put(upstream)  # type: ignore[union-attr]
        body = b'{"model": "%s", "messages": [{"role": "user", "content": "hello"}], ' \
               b'"stream": %s}' % (name.encode(), b"true" if stream else b"false")
        request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
                   b"Content-Type: application/json\r\nAuthorization: Bearer %s\r\n"
                   b"Content-Length: %d\r\n\r\n%s" % (plaintext.encode(), len(body), body))
        done: asyncio.Future[None] = loop.create_future()
        answered = 0

        def client_reads(data: bytes) -> None:
            nonlocal answered
            if not data.startswith(b"HTTP/1.1 200 "):
                done.set_exception(RuntimeError(f"not a 200: {data[:200]!r}"))
                return
            answered += 1
            if answered == requests:
                done.set_result(None)
            else:
                loop.call_soon(edge.data_received, request)

        edge = HotConnection(_Server(), gateway, lambda: None, Connections(0),  # type: ignore[arg-type]
                             EdgeLimits(), 1 << 20)
        def client_closed() -> None:
            if not done.done():
                done.set_exception(RuntimeError("the edge closed the connection"))

        edge.connection_made(_Socket(client_reads, client_closed))  # type: ignore[arg-type]
        # As `server run`: the heap as it stands is frozen; then nothing should need collecting.
        gc.collect()
        gc.freeze()
        gc.disable()
        try:
            started = time.process_time()
            loop.call_soon(edge.data_received, request)
            await done
            cpu = time.process_time() - started
            await asyncio.sleep(0)  # the last request's accounting
            left = gc.collect()
        finally:
            gc.enable()
            gc.unfreeze()
        await transport.close()
        store.close()
    return cpu / requests * 1e6, left / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000, help="per round (default 20000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per mode (default 5)")
    args = parser.parse_args()
    for stream in (False, True):
        results = [uvloop.run(_round(stream, args.requests)) for _ in range(args.rounds)]
        cpu = [c for c, _ in results]
        print(f"{'stream' if stream else 'json':6}  CPU µs/request: min {min(cpu):.1f}  "
              f"rounds {' '.join(f'{c:.1f}' for c in cpu)}  "
              f"cyclic garbage: {max(g for _, g in results):.2f} objects/request")


if __name__ == "__main__":
    main()
