"""OpenAI's chat completions (and legacy completions, embeddings and rerank, which pass through):
reading a request, reading an answer's text, and writing this dialect's errors and endings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from llmgw.core.errors import InvalidRequest, LlmgwError
from llmgw.gateway.wire import checks
from llmgw.gateway.wire.dialect import NOTHING_SENT, Ask, SentSoFar, UsageFormat, Wire
from llmgw.gateway.wire.judged import tool_text
from llmgw.gateway.wire.openai_errors import openai_error_body
from llmgw.gateway.wire.sse import DONE
from llmgw.guard.prompts import Role, Turn

_ROLES: dict[str, Role] = {"system": "system", "developer": "system", "user": "user",
                           "assistant": "assistant"}
# Every role chat completions take (as OpenAI lists them); another is refused, as OpenAI does.
_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")

USAGE = UsageFormat(prompt=b'"prompt_tokens"', completion=b'"completion_tokens"',
                    text_markers=(b'"content":"', b'"text":"'))


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts (other parts are not
    judged)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _tool_calls_text(calls: Any) -> str:
    out = []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            out.append(tool_text(str(function.get("name", "")), str(function.get("arguments", ""))))
    return "\n".join(out)


def read_chat(payload: dict[str, Any]) -> Ask:
    """A chat completions request."""
    model = checks.required_str(payload, "model")
    checks.required(payload, "messages", list, "an array of messages")
    messages = payload["messages"]
    if not messages:
        raise InvalidRequest("'messages' must contain at least one message", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidRequest(f"'messages.{i}' must be an object with 'role' and 'content'",
                                 param=f"messages.{i}")
        role = m.get("role")
        if not isinstance(role, str) or role not in _CHAT_ROLES:
            raise InvalidRequest(f"'messages.{i}.role' must be one of {', '.join(_CHAT_ROLES)}",
                                 param=f"messages.{i}.role")
    limits = [checks.token_count(payload, f) for f in ("max_tokens", "max_completion_tokens")]
    return Ask(model, lambda: _chat_turns(messages), limits[1] or limits[0],
               checks.flag(payload, "stream"))


def _chat_turns(messages: list[Any]) -> list[Turn]:
    turns = []
    for m in messages:  # checked by read_chat: objects with a known role
        # Tool and function results are read by the judge as the user's words; the calls a
        # model asked for are what it said.
        text = content_text(m.get("content"))
        calls = _tool_calls_text(m.get("tool_calls"))
        turns.append(Turn(_ROLES.get(m["role"], "user"), "\n".join(t for t in (text, calls) if t)))
    return turns


def read_completion(payload: dict[str, Any]) -> Ask:
    """A legacy completions request: its prompt is the user's turn."""
    model = checks.required_str(payload, "model")
    checks.required(payload, "prompt", (str, list), "a string or an array")
    prompt = payload["prompt"]
    text = prompt if isinstance(prompt, str) else "\n".join(p for p in prompt if isinstance(p, str))
    return Ask(model, [Turn("user", text)], checks.token_count(payload, "max_tokens"),
               checks.flag(payload, "stream"))


def read_embedding(payload: dict[str, Any]) -> Ask:
    """An embeddings request: nothing is generated, nothing is judged."""
    model = checks.required_str(payload, "model")
    checks.required(payload, "input", (str, list), "a string or an array")
    return Ask(model, [], None, False)


def read_rerank(payload: dict[str, Any]) -> Ask:
    """A rerank request (llama.cpp's, Jina's and Cohere's shape): passed through unjudged."""
    model = checks.required_str(payload, "model")
    checks.required_str(payload, "query")
    checks.required(payload, "documents", list, "an array")
    return Ask(model, [], None, False)


def answer_text(raw: bytes) -> str:
    """The generated text of a whole chat or completion answer (and the tools it called)."""
    try:
        obj = orjson.loads(raw)
        choice = obj["choices"][0]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return ""
    if not isinstance(choice, dict):
        return ""
    message = choice.get("message")
    if isinstance(message, dict):
        reasoning = message.get("reasoning_content")
        text, calls = content_text(message.get("content")), _tool_calls_text(message.get("tool_calls"))
        return "\n".join(t for t in (reasoning if isinstance(reasoning, str) else "", text, calls) if t)
    return str(choice.get("text") or "")


def event_text(event: bytes) -> str:
    """The generated text a stream event carries (chat delta, tool arguments or completion text)."""
    for line in event.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return ""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return ""
        return _chunk_text(obj)
    return ""


def _chunk_text(obj: Any) -> str:
    if not isinstance(obj, dict):
        return ""
    parts = []
    for choice in obj.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if isinstance(delta.get("content"), str):
                parts.append(delta["content"])
            if isinstance(delta.get("reasoning_content"), str):  # the client reads it too
                parts.append(delta["reasoning_content"])
            for call in delta.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                    parts.append(function["arguments"])
        elif isinstance(choice.get("text"), str):
            parts.append(choice["text"])
    return "".join(parts)


def blocked_ending(model: str, error: LlmgwError, _sent: SentSoFar = NOTHING_SENT) -> bytes:
    """How a blocked stream ends: a content_filter finish, an error event, and [DONE]."""
    finish = {
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}],
    }
    return (b"data: " + orjson.dumps(finish) + b"\n\ndata: " + openai_error_body(error) + b"\n\n"
            + DONE + b"\n\n")


_BROKE = b"data: " + orjson.dumps(
    {"error": {"message": "upstream stream broke", "type": "server_error", "param": None,
               "code": "upstream_error"}}
) + b"\n\n"


def stream_broke() -> bytes:
    """The event that ends a stream whose upstream broke."""
    return _BROKE


def _wire(name: str, read: Callable[[dict[str, Any]], Ask]) -> Wire:
    return Wire(name=name, usage=USAGE, read=read, answer_text=answer_text, event_text=event_text,
                blocked_ending=blocked_ending, stream_broke=stream_broke, error_body=openai_error_body)


CHAT = _wire("chat_completions", read_chat)
COMPLETIONS = _wire("completions", read_completion)
EMBEDDINGS = _wire("embeddings", read_embedding)
RERANK = _wire("rerank", read_rerank)
