"""Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`): what guard, limits
and usage need of its requests and answers, and its errors and endings, in its own shapes.

Judges read a conversation of plain turns, so blocks become text: `text` blocks as they are,
`tool_use` blocks as `tool NAME: {JSON input}` in the assistant's turn (the judge should see what
the model asked a tool to do), `tool_result` blocks as the user's words. Images, documents and
thinking blocks are not judged.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import orjson

from llmgw.core.errors import InvalidRequest, LlmgwError
from llmgw.gateway.wire import checks
from llmgw.gateway.wire.dialect import NOTHING_SENT, Ask, SentSoFar, UsageFormat, Wire
from llmgw.gateway.wire.judged import tool_text
from llmgw.gateway.wire.sse import event, json_of
from llmgw.guard.prompts import Role, Turn

_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Anthropic's error types by HTTP status (its documented statuses; the rest by class).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}


# --- requests ---------------------------------------------------------------------------------


def read(payload: dict[str, Any]) -> Ask:
    """A Messages request as Anthropic validates it; InvalidRequest naming the field when not."""
    ask = _read(payload)
    max_tokens = checks.token_count(payload, "max_tokens", required=True)
    checks.string_list(payload, "stop_sequences")
    checks.optional(payload, "tools", list, "an array of tools")
    checks.optional(payload, "tool_choice", dict, "an object")
    checks.optional(payload, "metadata", dict, "an object")
    for name in ("temperature", "top_p"):
        checks.optional_number(payload, name)
    checks.optional(payload, "top_k", int, "an integer")
    return dataclasses.replace(ask, max_tokens=max_tokens, stream=checks.flag(payload, "stream"))


def count_tokens_check(payload: dict[str, Any]) -> Ask:
    """A `/v1/messages/count_tokens` body (no `max_tokens`, never streamed), checked as a message's.

    No turns for judges: counting generates nothing (as embeddings, it is not judged), and agents
    count often, so a judge's latency, or its outage under a fail-closed policy, must not land on
    every count. The same conversation is judged when it is sent to `/v1/messages`.
    """
    ask = _read(payload)
    checks.optional(payload, "tools", list, "an array of tools")
    return Ask(ask.model, [], None, False)


def _read(payload: dict[str, Any]) -> Ask:
    """Model, system and messages: what both endpoints take."""
    model = checks.required_str(payload, "model")
    turns = _system_turns(payload.get("system"))
    messages = payload.get("messages")
    if messages is None:
        raise InvalidRequest("'messages' is a required property", param="messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array of messages", param="messages")
    for i, message in enumerate(messages):
        turns.append(_message_turn(message, f"messages.{i}"))
    return Ask(model, turns, None, False)


def _system_turns(system: Any) -> list[Turn]:
    if system is None:
        return []
    if isinstance(system, str):
        return [Turn("system", system)]
    if isinstance(system, list):
        texts = []
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(
                block.get("text"), str
            ):
                raise InvalidRequest("'system' blocks must be text blocks", param=f"system.{i}")
            texts.append(block["text"])
        return [Turn("system", "\n".join(texts))]
    raise InvalidRequest("'system' must be a string or an array of text blocks", param="system")


def _message_turn(message: Any, where: str) -> Turn:
    if not isinstance(message, dict):
        raise InvalidRequest(f"'{where}' must be an object with 'role' and 'content'", param=where)
    role = _ROLES.get(str(message.get("role")))
    if role is None:
        raise InvalidRequest(f"'{where}.role' must be 'user' or 'assistant'", param=f"{where}.role")
    content = message.get("content")
    if isinstance(content, str):
        return Turn(role, content)
    if not isinstance(content, list):
        raise InvalidRequest(
            f"'{where}.content' must be a string or an array of content blocks", param=f"{where}.content"
        )
    parts = [_block_text(block, f"{where}.content.{j}") for j, block in enumerate(content)]
    return Turn(role, "\n".join(p for p in parts if p))


def _block_text(block: Any, where: str) -> str:
    """What a judge reads of one content block of a request, after checking its shape."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise InvalidRequest(f"'{where}' must be a content block with a 'type'", param=where)
    kind = block["type"]
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise InvalidRequest(f"'{where}.text' must be a string", param=f"{where}.text")
        return str(block["text"])
    if kind == "tool_use":
        if not isinstance(block.get("name"), str):
            raise InvalidRequest(f"'{where}.name' must be a string", param=f"{where}.name")
        if not isinstance(block.get("input"), dict):
            raise InvalidRequest(f"'{where}.input' must be an object", param=f"{where}.input")
        return tool_text(block["name"], orjson.dumps(block["input"]).decode())
    if kind == "tool_result":
        if not isinstance(block.get("tool_use_id"), str):
            raise InvalidRequest(f"'{where}.tool_use_id' must be a string", param=f"{where}.tool_use_id")
        content = block.get("content")
        if content is None or isinstance(content, str):
            return content or ""
        if not isinstance(content, list):
            raise InvalidRequest(
                f"'{where}.content' must be a string or an array of content blocks", param=f"{where}.content"
            )
        parts = [_block_text(inner, f"{where}.content.{k}") for k, inner in enumerate(content)]
        return "\n".join(p for p in parts if p)
    return ""  # images, documents, thinking: not judged


# --- answers ----------------------------------------------------------------------------------


def answer_text(raw: bytes) -> str:
    """The text of a whole Messages answer: its text blocks and its tool calls' inputs."""
    try:
        content = orjson.loads(raw)["content"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return ""
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
            parts.append(block["thinking"])
        elif block.get("type") == "tool_use" and isinstance(block.get("name"), str):
            parts.append(tool_text(block["name"], orjson.dumps(block.get("input")).decode()))
    return "\n".join(parts)


def event_text(sse: bytes) -> str:
    """The text one streamed event carries: a text or thinking delta, a tool's partial input, or
    the head of a tool call (its name, on its own line as in `answer_text`)."""
    obj = json_of(sse)
    if obj is None:
        return ""
    kind = obj.get("type")
    if kind == "content_block_delta":
        delta = obj.get("delta")
        if not isinstance(delta, dict):
            return ""
        if delta.get("type") == "text_delta":
            text = delta.get("text")
        elif delta.get("type") == "input_json_delta":
            text = delta.get("partial_json")
        elif delta.get("type") == "thinking_delta":  # the client reads reasoning too: judged
            text = delta.get("thinking")
        else:
            return ""
        return text if isinstance(text, str) else ""
    if kind == "content_block_start":
        block = obj.get("content_block")
        if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("name"), str):
            return "\n" + tool_text(block["name"], "")
    return ""


# --- errors and endings -----------------------------------------------------------------------


def error_type(status: int) -> str:
    """Anthropic's error `type` for an HTTP status."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def _error(type_: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}}


def error_body(error: LlmgwError) -> bytes:
    """`{"type": "error", "error": {"type", "message"}}` for `error`, typed by its status."""
    return orjson.dumps(_error(error_type(error.status), error.message))


def blocked_ending(model: str, error: LlmgwError, _sent: SentSoFar = NOTHING_SENT) -> bytes:
    """How a stream the guard stopped ends: a refusal stop, then an `error` event.

    The `message_delta` with `stop_reason: "refusal"` is how Anthropic itself ends a stream its
    policy stops, so a client that reads stop reasons (and the SDK's accumulated message) sees a
    refusal; it is only sent for a blocked answer, not when the guard could not judge. The
    `error` event that follows makes the SDK raise (its stream decoder turns any `error` event
    into an APIStatusError carrying this body), so `messages.create(stream=True)` iteration and
    `messages.stream()` both stop with the guard's message instead of ending quietly. No
    `message_stop` follows: nothing after an `error` event is read, as with Anthropic's own
    mid-stream errors. No `content_block_stop` either: the open block's index is not known here,
    and neither the SDK nor the protocol's error path needs the block closed.
    """
    out = b""
    if error.code == "content_filter":
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": "refusal",
                "stop_sequence": None,
                "stop_details": {"type": "refusal", "category": None, "explanation": error.message},
            },
            # Required by the event's type; the real count is what the upstream reported.
            "usage": {"output_tokens": 0},
        }
        out = event(delta, "message_delta")
    return out + event(_error(error_type(error.status), error.message), "error")


def stream_broke() -> bytes:
    """The `error` event ending a stream whose upstream broke after the first byte."""
    return event(_error("api_error", "upstream stream broke"), "error")


# --- models -----------------------------------------------------------------------------------


def models_body(models: list[tuple[str, datetime | None]]) -> bytes:
    """`GET /v1/models` in Anthropic's shape: names and when each was added (RFC 3339)."""
    data = [
        # Every model llmgw lists is served: `lifecycle` says so to SDKs that read it.
        {"type": "model", "id": name, "display_name": name, "created_at": _rfc3339(created),
         "lifecycle": "active"}
        for name, created in models
    ]
    return orjson.dumps({
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    })


def _rfc3339(when: datetime | None) -> str:
    if when is None:
        when = _EPOCH
    elif when.tzinfo is None:  # the store keeps UTC without a zone
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


WIRE = Wire(
    name="anthropic_messages",
    usage=UsageFormat(
        prompt=b'"input_tokens"',
        completion=b'"output_tokens"',
        prompt_also=(b'"cache_read_input_tokens"', b'"cache_creation_input_tokens"'),
        # One per content_block_delta that carries text or tool input (llama-server writes these
        # without spaces); empty content_block_start text is not counted.
        text_markers=(b'"type":"text_delta"', b'"type":"input_json_delta"'),
        prompt_first=True,
    ),
    read=read,
    answer_text=answer_text,
    event_text=event_text,
    blocked_ending=blocked_ending,
    stream_broke=stream_broke,
    error_body=error_body,
)
# `/v1/messages/count_tokens`: the same dialect, read without a required `max_tokens`.
COUNT_TOKENS = dataclasses.replace(WIRE, name="count_tokens", read=count_tokens_check)
