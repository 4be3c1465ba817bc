"""What each dialect costs llmgw in CPU per request, with the network and the event loop taken out.

The request path's dialect-specific work, with `bench/run.sh`'s requests and fake answers: parse
and check the client's body (`Wire.read`), plan and write the upstream request (`outbound`: the
client's bytes, or a translation), count usage on the answer (`UsageTap`), and give the answer
back in the client's dialect (`answer`, or the stream relay: as it came, or translated event by
event). Everything else on the path (auth, routing, limits, metrics, aiohttp) is the same for
every dialect, so the differences between rows are what a dialect adds; `bench/run.sh` shows the
whole path.

    .venv/bin/python bench/dialect_cost.py [--seconds 1.0]

Prints a Markdown table: microseconds per request (best of 5 runs) and the difference to chat
completions in the same mode. A stream's answer is fed as one chunk, as nginx sends a body of
this size; `--chunks-per-event` feeds it one event per chunk, as a token-by-token upstream does.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from llmgw.core.types import ApiKey, KeyScope, Model, ProviderApi, RemoteSource
from llmgw.gateway.call import UpstreamCall
from llmgw.gateway.relay import answer, events, joined, outbound, passthrough
from llmgw.gateway.service import WIRES
from llmgw.gateway.upstream.table import Serving
from llmgw.gateway.usage import UsageTap
from llmgw.gateway.wire.dialect import Api

TEXT = "Hello! This is a fixed answer from the benchmark upstream."
TOKENS = [f"tok{i} " for i in range(2, 20)]


def _chat_chunk(delta: dict[str, Any], finish: str | None) -> bytes:
    chunk = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
             "model": "fake", "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                           "finish_reason": finish}]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _msg_event(data: dict[str, Any]) -> bytes:
    return b"event: " + str(data["type"]).encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


# The fake upstream's answers, as bench/run.sh has nginx return them.
CHAT_JSON = orjson.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "fake",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT}, "logprobs": None,
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 20, "total_tokens": 29},
})
CHAT_SSE = [
    _chat_chunk({"role": "assistant", "content": ""}, None),
    *(_chat_chunk({"content": t}, None) for t in TOKENS),
    _chat_chunk({}, "stop"),
    b"data: " + orjson.dumps({"id": "chatcmpl-bench", "object": "chat.completion.chunk",
                              "created": 1700000000, "model": "fake", "choices": [],
                              "usage": {"prompt_tokens": 9, "completion_tokens": 20,
                                        "total_tokens": 29}}) + b"\n\n",
    b"data: [DONE]\n\n",
]
MSG_JSON = orjson.dumps({
    "id": "msg_bench", "type": "message", "role": "assistant", "content": [{"type": "text", "text": TEXT}],
    "model": "fake", "stop_reason": "end_turn", "stop_sequence": None,
    "usage": {"input_tokens": 9, "output_tokens": 20},
})
MSG_SSE = [
    _msg_event({"type": "message_start", "message": {
        "id": "msg_bench", "type": "message", "role": "assistant", "content": [], "model": "fake",
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 9, "output_tokens": 0}}}),
    _msg_event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    *(_msg_event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}})
      for t in TOKENS),
    _msg_event({"type": "content_block_stop", "index": 0}),
    _msg_event({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 20}}),
    _msg_event({"type": "message_stop"}),
]

# row → (client API, provider API of the model, client body without `stream`)
ROWS: dict[str, tuple[Api, ProviderApi, dict[str, Any]]] = {
    "chat completions": (Api.CHAT, ProviderApi.OPENAI,
                         {"model": "m", "messages": [{"role": "user", "content": "hello"}]}),
    "messages": (Api.MESSAGES, ProviderApi.ANTHROPIC,
                 {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]}),
    "messages → chat": (Api.MESSAGES, ProviderApi.OPENAI,
                        {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]}),
    "responses → chat": (Api.RESPONSES, ProviderApi.OPENAI, {"model": "m", "input": "hello"}),
}

KEY = ApiKey(id="k", name="bench", prefix="sk-llmgw-bench", last4="0000", hash="-", scope=KeyScope.USER)


class _Conn:
    """Stands in for a transport Connection: the upstream's chunks, at once."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def _drain(agen: AsyncIterator[bytes]) -> int:
    """Run an async iterator that never waits, without an event loop; the bytes it gave."""
    size = 0
    while True:
        step = agen.__anext__()
        try:
            step.send(None)  # type: ignore[attr-defined]
        except StopIteration as done:
            size += len(done.value)
        except StopAsyncIteration:
            return size
        else:
            raise RuntimeError("the relay waited on something")


def one_request(api: Api, provider: ProviderApi, body: bytes, stream: bool,
                upstream: bytes | list[bytes]) -> Callable[[], int]:
    """A function doing one request's dialect work; it returns the bytes the client would get."""
    route = Serving(Model(name="m", source=RemoteSource(base_url="http://127.0.0.1:9/v1", api=provider)), ())
    wire = WIRES[api]

    def run() -> int:
        payload = orjson.loads(body)
        ask = wire.read(payload)
        call = UpstreamCall(route, body, payload, api, wire, ask, "", KEY, 0.0)
        out = outbound(call)
        tap = UsageTap(out.wire.usage, out.wire.answer_text)
        if not stream:
            assert isinstance(upstream, bytes)
            tap.whole(upstream)
            size = len(answer(call, out, upstream))
        else:
            assert isinstance(upstream, list)
            conn: Any = _Conn(upstream)
            if out.translation is None:
                size = _drain(passthrough(conn, tap, call.wire))
            else:
                size = _drain(joined(events(conn, tap, call.wire, out.translation, ask.model)))
        tap.result(prompt_estimate=len(body) // 4)
        return size

    return run


def per_request_us(fn: Callable[[], int], seconds: float) -> float:
    """Microseconds per call, the best of 5 runs of about `seconds` / 5 each."""
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.05:
        fn()
        n += 1
    batch = max(1, int(n * seconds / 5 / 0.05))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        best = min(best, (time.perf_counter() - t0) / batch)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="time per row and mode")
    parser.add_argument("--chunks-per-event", action="store_true",
                        help="feed a stream one event per chunk instead of in one chunk")
    args = parser.parse_args()
    print("| API | mode | µs per request | vs chat completions |")
    print("|---|---|---:|---:|")
    for mode in ("json", "stream"):
        chat_us = None
        for label, (api, provider, request) in ROWS.items():
            stream = mode == "stream"
            body = orjson.dumps({**request, "stream": stream})
            upstream: bytes | list[bytes]
            if provider == ProviderApi.ANTHROPIC:
                upstream = MSG_JSON if not stream else MSG_SSE
            else:
                upstream = CHAT_JSON if not stream else CHAT_SSE
            if isinstance(upstream, list) and not args.chunks_per_event:
                upstream = [b"".join(upstream)]
            us = per_request_us(one_request(api, provider, body, stream, upstream), args.seconds)
            chat_us = us if chat_us is None else chat_us
            diff = "-" if label == "chat completions" else f"{us - chat_us:+.1f} ({us / chat_us:.1f}×)"
            print(f"| {label} | {mode} | {us:.1f} | {diff} |")


if __name__ == "__main__":
    main()
