"""A remote provider that speaks only Anthropic's Messages API, for tests of llmgw translating to it.

`FakeAnthropicProvider` is a real aiohttp server. It answers `POST /v1/messages` whole or streamed
with a fixed answer, calls the first tool when offered tools, answers a tool result by quoting it,
honours `stop_sequences` and `max_tokens`, counts tokens at `POST /v1/messages/count_tokens`, and
answers every other path (`/v1/chat/completions` among them) with Anthropic's 404. It checks what
Anthropic checks that a translation could get wrong (the key and version headers, required and
unknown fields, roles, tool results that answer no tool use) and records every body it accepted,
so a test can assert on the request llmgw translated and on the usage it reported.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

API_KEY = "sk-ant-fake-key"
# Any one dated version: llmgw sends 2023-06-01, the SDK its own newer date.
VERSION = re.compile(r"\d{4}-\d{2}-\d{2}")
WORDS = ["The", " sea", " is", " wide", "."]
ANSWER = "".join(WORDS)
INPUT_TOKENS = 11  # every message's usage.input_tokens
TOOL_INPUT = {"city": "Paris", "unit": "celsius"}  # what the first offered tool is called with
TOOL_RESULT_PREFIX = "The tool said:"  # how an answer to a tool result starts

# Anthropic's error type for each status it answers with.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               500: "api_error", 529: "overloaded_error"}

_MESSAGE_FIELDS = {"model", "messages", "max_tokens", "system", "stop_sequences", "stream",
                   "temperature", "top_p", "top_k", "tools", "tool_choice", "metadata", "thinking",
                   "service_tier"}
_COUNT_FIELDS = {"model", "messages", "system", "tools", "tool_choice", "thinking"}


class Refused(Exception):
    """A request Anthropic would refuse: its status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def error_body(status: int, message: str) -> bytes:
    """Anthropic's error shape for `status`."""
    return orjson.dumps({"type": "error",
                         "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}})


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def count_tokens(body: dict[str, Any]) -> int:
    """The fake's token count: whitespace-separated words in every string of `system`, `messages`
    and `tools` (block types and roles included), so a test can compute it too."""
    return sum(len(s.split()) for part in ("system", "messages", "tools")
               for s in _strings(body.get(part)))


def _text_of(content: Any) -> str:
    """A tool result's content as text: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _check_messages(body: dict[str, Any]) -> None:
    """What Anthropic refuses in `system` and `messages` that a translation could produce."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Refused(400, "messages: at least one message is required")
    system = body.get("system")
    if system is not None and not isinstance(system, str) and not (
            isinstance(system, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                             for b in system)):
        raise Refused(400, "system: Input should be a valid string or a list of text blocks")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise Refused(400, f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = m.get("content")
        if not isinstance(content, str) and not (
                isinstance(content, list) and all(isinstance(b, dict) and isinstance(b.get("type"), str)
                                                  for b in content)):
            raise Refused(400, f"messages.{i}.content: Input should be a string or a list of blocks")
        results = [b for b in _blocks(m) if b["type"] == "tool_result"]
        if not results:
            continue
        before = messages[i - 1] if i > 0 else {}
        asked = {b.get("id") for b in _blocks(before) if b["type"] == "tool_use"}
        if m["role"] != "user" or any(b.get("tool_use_id") not in asked for b in results):
            raise Refused(400, f"messages.{i}.content: unexpected `tool_use_id` found in "
                               "`tool_result` blocks; each must answer a `tool_use` in the message before")


def _check_fields(body: Any, allowed: set[str], messages_api: bool) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise Refused(400, "the body must be a JSON object")
    extra = sorted(set(body) - allowed)
    if extra:
        raise Refused(400, f"{extra[0]}: Extra inputs are not permitted")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Refused(400, "model: Field required")
    if messages_api:
        tokens = body.get("max_tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise Refused(400, "max_tokens: Field required (an integer of at least 1)")
        stops = body.get("stop_sequences", [])
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise Refused(400, "stop_sequences: Input should be a list of non-empty strings")
    tools = body.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                              and isinstance(t.get("input_schema"), dict)
                                              for t in tools):
        raise Refused(400, "tools: each tool needs a name and an input_schema")
    choice = body.get("tool_choice", {"type": "auto"})
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise Refused(400, "tool_choice: Input should be an object of type auto, any, tool or none")
    _check_messages(body)
    return body


@dataclass
class Block:
    """One content block of an answer: text in pieces, or a tool call with its input in pieces."""

    type: str  # "text" or "tool_use"
    pieces: list[str]
    id: str = ""
    name: str = ""

    def whole(self) -> dict[str, Any]:
        if self.type == "text":
            return {"type": "text", "text": "".join(self.pieces)}
        return {"type": "tool_use", "id": self.id, "name": self.name,
                "input": orjson.loads("".join(self.pieces))}


@dataclass
class Reply:
    """What one request is answered with."""

    blocks: list[Block]
    stop_reason: str
    stop_sequence: str | None = None

    @property
    def output_tokens(self) -> int:
        # One token per piece sent: what the client counted in deltas is what usage says.
        return sum(len(b.pieces) for b in self.blocks)


def _words(text: str) -> list[str]:
    """Text in pieces of one word each, spaces kept in front as tokenizers do."""
    head, *rest = text.split(" ")
    return [p for p in [head, *(" " + w for w in rest)] if p]


def _cut(pieces: list[str], stops: list[str], max_tokens: int) -> tuple[list[str], str, str | None]:
    """`pieces` up to the first stop sequence or `max_tokens`, with the stop reason."""
    text = "".join(pieces)
    hits = [(text.find(s), s) for s in stops if s in text]
    if hits:
        at, stop = min(hits)
        kept, length = [], 0
        for p in pieces:
            if length >= at:
                break
            kept.append(p[: at - length])
            length += len(p)
        if len(kept) <= max_tokens:
            return [p for p in kept if p], "stop_sequence", stop
    if len(pieces) > max_tokens:
        return pieces[:max_tokens], "max_tokens", None
    return pieces, "end_turn", None


@dataclass
class FakeAnthropicProvider:
    """Answers the Messages API whole or streamed; knobs for the ways a test needs it to differ."""

    key: str = API_KEY
    words: list[str] = field(default_factory=lambda: list(WORDS))  # the fixed answer, in pieces
    preamble: str | None = None  # text before a tool_use block, as Claude often writes
    status: int = 200  # any other status answers Anthropic's error for it
    stall: bool = False  # a stream stops after its ping and never ends; a whole answer never comes
    # How answers' ids begin: Anthropic's `msg_`, or llama-server's `chatcmpl-` (it names its
    # Messages answers as chat completions).
    id_prefix: str = "msg_fake_"
    # Every body accepted at /v1/messages, in order of arrival, and the usage each was answered with.
    requests: list[dict[str, Any]] = field(default_factory=list)
    usages: list[dict[str, int]] = field(default_factory=list)
    counted: list[dict[str, Any]] = field(default_factory=list)  # bodies at /v1/messages/count_tokens
    versions: list[str] = field(default_factory=list)  # each accepted request's anthropic-version
    # Which header carried the key of each accepted request: "x-api-key" or "bearer". The API takes
    # both (the SDK sends `Authorization: Bearer`); bearer_ok=False takes x-api-key only.
    credentials: list[str] = field(default_factory=list)
    bearer_ok: bool = True
    arrived: asyncio.Queue[None] = field(default_factory=asyncio.Queue)  # one per request
    server: TestServer | None = None
    _ids: Iterator[int] = field(default_factory=itertools.count)

    @property
    def url(self) -> str:
        """The base URL llmgw is given (`--base-url`), to which `/messages` is appended."""
        assert self.server is not None
        return str(self.server.make_url("/v1"))

    async def start(self) -> FakeAnthropicProvider:
        app = web.Application()
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_post("/v1/messages/count_tokens", self.count)
        app.router.add_route("*", "/{tail:.*}", self.not_found)
        self.server = TestServer(app)
        await self.server.start_server()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    # --- requests ------------------------------------------------------------------------------

    def _error(self, status: int, message: str) -> web.Response:
        return web.Response(status=status, body=error_body(status, message),
                            content_type="application/json")

    def _authenticate(self, request: web.Request) -> None:
        bearer = request.headers.get("Authorization", "")
        if request.headers.get("x-api-key") == self.key:
            self.credentials.append("x-api-key")
        elif self.bearer_ok and bearer == f"Bearer {self.key}":
            self.credentials.append("bearer")
        else:
            raise Refused(401, "invalid x-api-key")
        versions = request.headers.getall("anthropic-version", [])
        if not versions:
            raise Refused(400, "anthropic-version: header is required")
        if len(versions) > 1 or not VERSION.fullmatch(versions[0]):
            raise Refused(400, f"anthropic-version: {', '.join(versions)!r} is not a valid version")
        self.versions.append(versions[0])

    async def _read(self, request: web.Request, allowed: set[str], messages_api: bool) -> dict[str, Any]:
        self.arrived.put_nowait(None)
        self._authenticate(request)
        if self.status != 200:
            raise Refused(self.status, "the fake provider was told to fail")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            raise Refused(400, "the body is not valid JSON") from None
        return _check_fields(body, allowed, messages_api)

    async def not_found(self, request: web.Request) -> web.Response:
        return self._error(404, f"{request.method} {request.path} does not exist")

    async def count(self, request: web.Request) -> web.Response:
        try:
            body = await self._read(request, _COUNT_FIELDS, messages_api=False)
        except Refused as exc:
            return self._error(exc.status, exc.message)
        self.counted.append(body)
        return web.json_response({"input_tokens": count_tokens(body)})

    async def messages(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._read(request, _MESSAGE_FIELDS, messages_api=True)
        except Refused as exc:
            return self._error(exc.status, exc.message)
        self.requests.append(body)
        n = next(self._ids)
        reply = self.reply(body, n)
        usage = {"input_tokens": INPUT_TOKENS, "output_tokens": reply.output_tokens}
        self.usages.append(usage)
        head = {"id": f"{self.id_prefix}{n}", "type": "message", "role": "assistant", "model": body["model"]}
        headers = {"request-id": f"req_fake_{n}"}
        if body.get("stream") is not True:
            if self.stall:
                await asyncio.Event().wait()  # still "generating"; only a cancel ends it
            return web.json_response({**head, "content": [b.whole() for b in reply.blocks],
                                      "stop_reason": reply.stop_reason,
                                      "stop_sequence": reply.stop_sequence, "usage": usage},
                                     headers=headers)
        resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for name, data in self.events(head, reply):
            await resp.write(b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n")
            if self.stall and name == "ping":
                await asyncio.Event().wait()
        return resp

    # --- answers -------------------------------------------------------------------------------

    def reply(self, body: dict[str, Any], n: int) -> Reply:
        """The answer to `body`: a tool call, an answer to a tool result, or the fixed text."""
        last = body["messages"][-1]
        results = [b for b in _blocks(last) if b["type"] == "tool_result"]
        tools = body.get("tools") or []
        calls = bool(tools) and body.get("tool_choice", {}).get("type") != "none"
        if calls and not results:
            blocks = [Block("text", _words(self.preamble))] if self.preamble else []
            args = orjson.dumps(TOOL_INPUT).decode()
            # In pieces that split keys and values, as Anthropic's input_json_delta events do.
            json_pieces = [args[i:i + 7] for i in range(0, len(args), 7)]
            blocks.append(Block("tool_use", json_pieces, id=f"toolu_fake_{n}", name=tools[0]["name"]))
            return Reply(blocks, "tool_use")
        if results:
            said = " ".join(_text_of(b.get("content")) for b in results)
            pieces = _words(f"{TOOL_RESULT_PREFIX} {said}")
        else:
            pieces = list(self.words)
        kept, reason, stop = _cut(pieces, body.get("stop_sequences") or [], body["max_tokens"])
        return Reply([Block("text", kept)], reason, stop)

    def events(self, head: dict[str, Any], reply: Reply) -> Iterator[tuple[str, dict[str, Any]]]:
        """The stream of server-sent events for `reply`, in Anthropic's order."""
        yield "message_start", {"type": "message_start", "message": {
            **head, "content": [], "stop_reason": None, "stop_sequence": None,
            # Output tokens so far; message_delta carries the final count, not an increment.
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}}}
        yield "ping", {"type": "ping"}
        for index, block in enumerate(reply.blocks):
            if block.type == "text":
                start: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in block.pieces]
            else:
                start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": p} for p in block.pieces]
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": start}
            for delta in deltas:
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": delta}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
        yield "message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": reply.stop_reason,
                                          "stop_sequence": reply.stop_sequence},
                                "usage": {"output_tokens": reply.output_tokens}}
        yield "message_stop", {"type": "message_stop"}
