"""Anthropic Messages ⇄ OpenAI chat completions, the answers: whole answers and streams, each way.

What an answer cannot carry: reasoning text (`reasoning_content`, thinking blocks, signatures)
and citations are not passed on; chat cannot say which stop sequence matched, so a chat stop
reads as `end_turn`. Tool arguments that are not a JSON object reach a Messages client under
UNPARSED_ARGUMENTS (see there).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

from llmgw.core.errors import UpstreamError
from llmgw.gateway.wire.sse import DONE, event, json_of

# Arguments that are not a JSON object: kept under this key rather than dropped for `{}`, so a tool
# whose parameters all have defaults does not run as if called without any, and the client's
# schema check (and the model, in the tool's error) can see what went wrong.
UNPARSED_ARGUMENTS = "_unparsed_arguments"

_TO_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                      "function_call": "tool_use", "content_filter": "refusal"}
_TO_CHAT_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
                   "max_tokens": "length", "model_context_window_exceeded": "length",
                   "tool_use": "tool_calls", "refusal": "content_filter"}


def dumps_text(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def tool_input(arguments: Any) -> dict[str, Any]:
    """A chat tool call's arguments as a tool_use input (see UNPARSED_ARGUMENTS)."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = orjson.loads(arguments)
    except (orjson.JSONDecodeError, TypeError):
        parsed = None
    return parsed if isinstance(parsed, dict) else {UNPARSED_ARGUMENTS: str(arguments)}


def call_of(block: dict[str, Any]) -> dict[str, Any]:
    """A tool_use block as a chat tool call."""
    return {"id": block.get("id"), "type": "function",
            "function": {"name": block.get("name"), "arguments": dumps_text(block.get("input", {}))}}


# ---------------------------------------------------------------------------------- answers


def _obj(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one: an upstream's answer is not trusted."""
    return value if isinstance(value, dict) else {}


def _objs(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _stop_reason(finish: Any, tool_calls: bool) -> str:
    """A chat finish_reason as a stop_reason; some upstreams end tool calls with a plain stop."""
    stop = _TO_ANTHROPIC_STOP.get(finish if isinstance(finish, str) else "stop", "end_turn")
    return "tool_use" if tool_calls and stop == "end_turn" else stop


def _finish_reason(stop: Any) -> str:
    return _TO_CHAT_FINISH.get(stop if isinstance(stop, str) else "end_turn", "stop")


def _usage_to_messages(usage: Any) -> dict[str, int]:
    usage = _obj(usage)
    return {"input_tokens": _count(usage.get("prompt_tokens")),
            "output_tokens": _count(usage.get("completion_tokens"))}


def _usage_to_chat(usage: dict[str, Any]) -> dict[str, int]:
    # Anthropic counts cached prompt tokens apart from input_tokens; chat counts them in the prompt
    prompt = sum(_count(usage.get(k)) for k in
                 ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    completion = _count(usage.get("output_tokens"))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def message_id(upstream: Any) -> str:
    """An answer's id as Anthropic names them (`msg_…`), keeping the upstream's own part of it."""
    if isinstance(upstream, str) and upstream.startswith("msg_"):
        return upstream
    tail = upstream.removeprefix("chatcmpl-") if isinstance(upstream, str) and upstream else uuid.uuid4().hex
    return f"msg_{tail}"


def _chat_id(upstream: Any) -> str:
    tail = upstream.removeprefix("msg_") if isinstance(upstream, str) and upstream else uuid.uuid4().hex
    return f"chatcmpl-{tail}"


def chat_answer_as_message(answer: dict[str, Any], model: str) -> dict[str, Any]:
    """A whole chat completion as an Anthropic message."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UpstreamError("the upstream answered without a choice")
    message = _obj(choices[0].get("message"))
    text = message.get("content") or message.get("refusal") or ""
    if isinstance(text, list):
        text = "".join(str(p.get("text") or "") for p in _objs(text))
    content: list[dict[str, Any]] = [{"type": "text", "text": str(text)}] if text else []
    calls = _objs(message.get("tool_calls"))
    for call in calls:
        function = _obj(call.get("function"))
        content.append({"type": "tool_use", "id": str(call.get("id") or f"toolu_{uuid.uuid4().hex}"),
                        "name": str(function.get("name") or ""),
                        "input": tool_input(function.get("arguments"))})
    if not content:
        # clients commonly read content[0]; an empty text block keeps that working
        content.append({"type": "text", "text": ""})
    stop = _stop_reason(choices[0].get("finish_reason"), bool(calls))
    return {"id": message_id(answer.get("id")), "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": _usage_to_messages(answer.get("usage"))}


def renamed_message(answer: dict[str, Any], _model: str) -> dict[str, Any]:
    """A whole Messages answer from an engine that names it as a chat completion, with Anthropic's
    `msg_…` id; the rest as it came."""
    return {**answer, "id": message_id(answer.get("id"))}


def message_answer_as_chat(answer: dict[str, Any], model: str) -> dict[str, Any]:
    """A whole Anthropic message as a chat completion."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in _objs(answer.get("content")):
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            calls.append(call_of(block))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None,
                               "refusal": None}
    if calls:
        message["tool_calls"] = calls
    finish = _finish_reason(answer.get("stop_reason"))
    return {"id": _chat_id(answer.get("id")), "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish,
                                         "logprobs": None}],
            "usage": _usage_to_chat(_obj(answer.get("usage")))}


# ---------------------------------------------------------------------------------- streams


class ChatStreamAsMessages:
    """A streamed chat completion, event by event, as Anthropic's stream of events."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._started = False
        self._done = False
        self._open: int | None = None  # the index of the content block now open
        self._open_kind = ""
        self._blocks = 0
        self._tools: dict[int, int] = {}  # upstream tool call index → content block index
        self._ids: set[str] = set()
        self._finish: Any = None
        self._usage: dict[str, Any] | None = None

    def feed(self, sse: bytes) -> list[bytes]:
        """The Anthropic events one upstream chat SSE event (without its blank line) completes."""
        if self._done:
            return []
        chunk = json_of(sse)
        if chunk is None:
            return self._close() if sse.strip() == DONE else []
        if "error" in chunk:
            self._done = True
            error = {"type": "api_error", "message": "upstream stream broke"}
            return [event({"type": "error", "error": error}, "error")]
        out = self._start(chunk.get("id"))
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = _objs(chunk.get("choices"))
        choice = choices[0] if choices else {}
        delta = _obj(choice.get("delta"))
        text = delta.get("content") or delta.get("refusal")
        if isinstance(text, str) and text:
            if self._open_kind != "text":
                out += self._open_block({"type": "text", "text": ""}, "text")
            out.append(self._delta({"type": "text_delta", "text": text}, self._open))
        for call in _objs(delta.get("tool_calls")):
            out += self._tool_call(call)
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]
            out += self._stop_block()
        return out

    def end(self) -> list[bytes]:
        """What the client is still owed when the upstream stream ended, [DONE] seen or not."""
        return [] if self._done else self._close()

    def _start(self, upstream_id: Any) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        # chat says the prompt's size only at the end: message_delta carries it then
        message: dict[str, Any] = {"id": message_id(upstream_id), "type": "message", "role": "assistant",
                                   "model": self._model, "content": [], "stop_reason": None,
                                   "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        # A ping follows, as Anthropic's own streams send one early: clients expect the event.
        return [event({"type": "message_start", "message": message}, "message_start"),
                event({"type": "ping"}, "ping")]

    def _tool_call(self, call: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        function = _obj(call.get("function"))
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else None
        index = call.get("index")
        if not isinstance(index, int):
            # some upstreams leave the index out: a new id means a new call, else the last one goes on
            new = call_id is not None and call_id not in self._ids
            index = len(self._tools) if new or not self._tools else max(self._tools)
        if call_id is not None:
            self._ids.add(call_id)
        if index not in self._tools:
            block: dict[str, Any] = {"type": "tool_use", "id": call_id or f"toolu_{uuid.uuid4().hex}",
                                     "name": str(function.get("name") or ""), "input": {}}
            out += self._open_block(block, "tool_use")
            self._tools[index] = self._blocks - 1
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            out.append(self._delta({"type": "input_json_delta", "partial_json": arguments},
                                   self._tools[index]))
        return out

    def _open_block(self, block: dict[str, Any], kind: str) -> list[bytes]:
        out = self._stop_block()
        self._open, self._open_kind = self._blocks, kind
        self._blocks += 1
        out.append(event({"type": "content_block_start", "index": self._open, "content_block": block},
                         "content_block_start"))
        return out

    def _delta(self, delta: dict[str, Any], index: int | None) -> bytes:
        return event({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")

    def _stop_block(self) -> list[bytes]:
        if self._open is None:
            return []
        index, self._open, self._open_kind = self._open, None, ""
        return [event({"type": "content_block_stop", "index": index}, "content_block_stop")]

    def _close(self) -> list[bytes]:
        self._done = True
        out = self._start(None) + self._stop_block()
        stop = _stop_reason(self._finish, bool(self._tools))
        usage = _usage_to_messages(self._usage)
        delta_usage: dict[str, int] = {"output_tokens": usage["output_tokens"]}
        if self._usage is not None:
            delta_usage["input_tokens"] = usage["input_tokens"]
        out.append(event({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                          "usage": delta_usage}, "message_delta"))
        out.append(event({"type": "message_stop"}, "message_stop"))
        return out


class MessageIdStream:
    """A Messages stream from an engine that names its answers as chat completions (llama-server's
    `chatcmpl-…`): message_start with Anthropic's `msg_…` id, every other event as it came."""

    def __init__(self, _model: str) -> None:
        self._started = False

    def feed(self, sse: bytes) -> list[bytes]:
        """The event, its id renamed when it is the stream's message_start."""
        if not self._started:
            obj = json_of(sse)
            if obj is not None:
                # message_start opens every stream: once an event with data went by, none is parsed
                self._started = True
                message = obj.get("message")
                if obj.get("type") == "message_start" and isinstance(message, dict):
                    message["id"] = message_id(message.get("id"))
                    return [event(obj, "message_start")]
        return [sse + b"\n\n"]

    def end(self) -> list[bytes]:
        """Nothing: the engine's own stream ends itself."""
        return []


class MessagesStreamAsChat:
    """Anthropic's stream of events, event by event, as a streamed chat completion."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._id = _chat_id(None)
        self._created = int(time.time())
        self._done = False
        self._finished = False
        self._tools: dict[int, int] = {}  # content block index → chat tool call index
        self._silent: set[int] = set()  # tool blocks whose arguments have not begun yet
        self._usage: dict[str, Any] = {}

    def feed(self, sse: bytes) -> list[bytes]:
        """The chat chunks one upstream Anthropic SSE event (without its blank line) completes."""
        if self._done:
            return []
        obj = json_of(sse)
        kind = obj.get("type") if obj else None
        if obj is None or kind == "ping":
            return []
        index: int = obj["index"] if isinstance(obj.get("index"), int) else -1
        if kind == "message_start":
            message = _obj(obj.get("message"))
            self._id = _chat_id(message.get("id"))
            self._usage.update(_obj(message.get("usage")))
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            return self._block_start(index, _obj(obj.get("content_block")))
        if kind == "content_block_delta":
            return self._block_delta(index, _obj(obj.get("delta")))
        if kind == "content_block_stop" and index in self._silent:
            # a tool without parameters: chat clients parse the arguments, and "" is not JSON
            self._silent.discard(index)
            call = {"index": self._tools[index], "function": {"arguments": "{}"}}
            return [self._chunk({"tool_calls": [call]})]
        if kind == "message_delta":
            # its counts are cumulative: they replace what message_start said
            self._usage.update({k: v for k, v in _obj(obj.get("usage")).items() if v is not None})
            self._finished = True
            return [self._chunk({}, _finish_reason(_obj(obj.get("delta")).get("stop_reason")))]
        if kind == "message_stop":
            return self.end()
        if kind == "error":
            self._done = True
            error = {"message": "upstream stream broke", "type": "server_error", "param": None,
                     "code": "upstream_error"}
            return [b"data: " + orjson.dumps({"error": error}) + b"\n\n"]
        return []

    def end(self) -> list[bytes]:
        """What the client is still owed: a finish chunk if none came, the usage chunk, [DONE]."""
        if self._done:
            return []
        self._done = True
        out = [] if self._finished else [self._chunk({}, "tool_calls" if self._tools else "stop")]
        usage = self._base()
        usage.update(choices=[], usage=_usage_to_chat(self._usage))
        out.append(b"data: " + orjson.dumps(usage) + b"\n\n")
        out.append(DONE + b"\n\n")
        return out

    def _block_start(self, index: int, block: dict[str, Any]) -> list[bytes]:
        if block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"]:
            return [self._chunk({"content": block["text"]})]
        if block.get("type") != "tool_use":
            return []
        self._tools[index] = len(self._tools)
        initial = block.get("input")
        if not initial:
            self._silent.add(index)
        call = {"index": self._tools[index], "id": str(block.get("id") or f"call_{uuid.uuid4().hex}"),
                "type": "function", "function": {"name": str(block.get("name") or ""),
                                                 "arguments": dumps_text(initial) if initial else ""}}
        return [self._chunk({"tool_calls": [call]})]

    def _block_delta(self, index: int, delta: dict[str, Any]) -> list[bytes]:
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str) and delta["text"]:
            return [self._chunk({"content": delta["text"]})]
        partial = delta.get("partial_json")
        if delta.get("type") == "input_json_delta" and isinstance(partial, str) and partial \
                and index in self._tools:
            self._silent.discard(index)
            call = {"index": self._tools[index], "function": {"arguments": delta["partial_json"]}}
            return [self._chunk({"tool_calls": [call]})]
        return []  # thinking, signatures and citations have no place in chat

    def _base(self) -> dict[str, Any]:
        return {"id": self._id, "object": "chat.completion.chunk", "created": self._created,
                "model": self._model}

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = self._base()
        chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
        return b"data: " + orjson.dumps(chunk) + b"\n\n"
