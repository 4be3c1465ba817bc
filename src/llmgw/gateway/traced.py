"""The request's span in the words of OpenTelemetry's GenAI semantic conventions: what was asked,
what it used, how it ended, and when its first token came.

Only called when the request's span records (telemetry on and the trace sampled): nothing here
runs on the hot path of an install without telemetry. No prompt or answer text goes into these
attributes.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Mapping

from llmgw.core.tracing import Kind, Span, Tracer
from llmgw.gateway.call import Exchange, UpstreamCall
from llmgw.gateway.usage import Tokens, UsageTap
from llmgw.gateway.wire import openai_chat
from llmgw.gateway.wire.apis import APIS
from llmgw.gateway.wire.dialect import Api, UsageFormat

# `gen_ai.operation.name` per API (the conventions' well-known names where there is one).
OPERATIONS: dict[Api, str] = {api: spec.operation for api, spec in APIS.items()}
FIRST_TOKEN = "gen_ai.first_token"
# OpenAI's `finish_reason` and Anthropic's `stop_reason`, read from the answer's last bytes.
_FINISH = re.compile(rb'"(?:finish_reason|stop_reason)"\s*:\s*"([A-Za-z_]{1,32})"')


def request_span(tracer: Tracer, api: Api, headers: Mapping[str, str], host: str, path: str) -> Span:
    """The root span of one data-plane request, continuing the caller's trace when its headers
    carry a W3C `traceparent`. Named `{operation} {model}` once the model is known."""
    operation = OPERATIONS[api]
    address, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
    attributes: dict[str, str | int] = {
        "gen_ai.operation.name": operation, "http.request.method": "POST", "url.path": path,
        "server.address": address or host,
    }
    if port.isdigit():
        attributes["server.port"] = int(port)
    return tracer.root(operation, Kind.SERVER, attributes, headers)


def asked(span: Span, call: UpstreamCall) -> None:
    """What the request asks for, once its body is read and its model resolved."""
    ask, model = call.ask, call.route.model
    span.rename(f"{OPERATIONS[call.api]} {ask.model}")
    span.update({
        "gen_ai.request.model": ask.model,
        "gen_ai.provider.name": "openai" if model.is_remote else "llama.cpp",
        "llmgw.request_id": call.request_id,
        "llmgw.key": call.key.label,
        "llmgw.stream": ask.stream,
    })
    if ask.max_tokens:
        span.set("gen_ai.request.max_tokens", ask.max_tokens)
    if call.plan is not None:
        span.set("llmgw.route", call.plan.spec.name)
    if call.route.upstream_model:
        span.set("gen_ai.response.model", call.route.upstream_model)


class TracedTap(UsageTap):
    """The usage tap of a traced request: it also keeps the answer's last bytes, by reference,
    for its finish reasons (a plain tap keeps nothing it does not count)."""

    def __init__(self, fmt: UsageFormat = openai_chat.USAGE,
                 answer_text: Callable[[bytes], str] = openai_chat.answer_text) -> None:
        super().__init__(fmt, answer_text)
        self.tail: deque[bytes] = deque(maxlen=4)

    def whole(self, body: bytes) -> None:
        super().whole(body)
        self.tail.append(body[-4096:])

    def chunk(self, data: bytes) -> None:
        super().chunk(data)
        self.tail.append(data)

    def finish_reasons(self) -> list[str]:
        return [m.decode() for m in _FINISH.findall(b"".join(self.tail))]


def ended(span: Span, exchange: Exchange, tokens: Tokens, status: int, code: str) -> None:
    """How the request ended: its usage, finish reasons, status and first token."""
    span.update({
        "gen_ai.usage.input_tokens": tokens.prompt,
        "gen_ai.usage.output_tokens": tokens.completion,
        "http.response.status_code": status,
    })
    tap = exchange.tap
    if isinstance(tap, TracedTap) and (reasons := tap.finish_reasons()):
        span.set("gen_ai.response.finish_reasons", reasons)
    if code:
        span.set("error.type", code)
    if exchange.blocked:
        span.set("llmgw.guard.blocked", True)
    if exchange.target:  # a route's call: the target that answered
        span.set("llmgw.route.target", exchange.target)
    if tap.first_chunk_at is not None:
        # The tap timed it on the monotonic clock; spans take wall-clock nanoseconds.
        ago = time.monotonic() - tap.first_chunk_at
        span.event(FIRST_TOKEN, at_ns=time.time_ns() - int(ago * 1e9))
