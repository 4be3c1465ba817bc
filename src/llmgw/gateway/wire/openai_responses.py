"""OpenAI's Responses API (`POST /v1/responses`): what guard, limits and usage need of its requests
and answers, and its errors and endings, in its own shapes.

llmgw keeps no responses, so everything that refers to a stored one (`previous_response_id`,
`store: true`, `conversation`, `item_reference` items, `background`) is refused with a 400 naming
the field rather than dropped: a client that relies on them must learn they did nothing.

Judges read a conversation of plain turns: `instructions` and system/developer messages as the
system turn, message text as it is, function calls as `tool NAME: ARGUMENTS` in the assistant's
turn and function call outputs as the user's words. Images and files are not judged.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from llmgw.core.errors import InvalidRequest, LlmgwError
from llmgw.gateway.wire import checks
from llmgw.gateway.wire.dialect import NOTHING_SENT, Ask, SentSoFar, UsageFormat, Wire
from llmgw.gateway.wire.judged import tool_text
from llmgw.gateway.wire.openai_errors import openai_error_body
from llmgw.gateway.wire.sse import event, json_of
from llmgw.guard.prompts import Role, Turn

_ROLES: dict[str, Role] = {
    "user": "user", "assistant": "assistant", "system": "system", "developer": "system",
}
_STATELESS = "llmgw keeps no responses: send the whole conversation in `input`"


# --- requests ---------------------------------------------------------------------------------


def read(payload: dict[str, Any]) -> Ask:
    """A Responses request, checked; InvalidRequest naming the field when llmgw cannot serve it."""
    _refuse_state(payload)
    model = checks.required_str(payload, "model")
    turns: list[Turn] = []
    instructions = payload.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise InvalidRequest("'instructions' must be a string", param="instructions")
        turns.append(Turn("system", instructions))
    if "input" not in payload or payload["input"] is None:
        raise InvalidRequest("'input' is a required property", param="input")
    items = payload["input"]
    if isinstance(items, str):
        turns.append(Turn("user", items))
    elif isinstance(items, list):
        for i, item in enumerate(items):
            turn = _item_turn(item, f"input.{i}")
            if turn is not None:
                turns.append(turn)
    else:
        raise InvalidRequest("'input' must be a string or an array of input items", param="input")
    max_tokens = checks.token_count(payload, "max_output_tokens")
    checks.optional(payload, "tools", list, "an array of tools")
    checks.optional(payload, "tool_choice", (str, dict), "a string or an object")
    checks.optional(payload, "metadata", dict, "an object")
    checks.optional(payload, "parallel_tool_calls", bool, "a boolean")
    for name in ("temperature", "top_p"):
        checks.optional_number(payload, name)
    return Ask(model, turns, max_tokens, checks.flag(payload, "stream"))


def _refuse_state(payload: dict[str, Any]) -> None:
    """Refuse what needs responses kept between requests (the engine keeps none either)."""
    for name in ("previous_response_id", "conversation"):
        if payload.get(name) is not None:
            raise InvalidRequest(f"'{name}' is not supported: {_STATELESS}", param=name)
    if payload.get("store") is True:
        raise InvalidRequest(f"'store: true' is not supported: {_STATELESS}; send 'store: false'",
                             param="store")
    checks.optional(payload, "store", bool, "a boolean")
    if payload.get("background") is True:
        raise InvalidRequest("'background: true' is not supported: llmgw answers while the client waits",
                             param="background")
    checks.optional(payload, "background", bool, "a boolean")


def _item_turn(item: Any, where: str) -> Turn | None:
    """The turn one input item reads as; None for items nothing is judged in."""
    if not isinstance(item, dict):
        raise InvalidRequest(f"'{where}' must be an input item object", param=where)
    kind = item.get("type", "message")
    if kind == "message":
        return _message_turn(item, where)
    if kind == "function_call":
        name, arguments = item.get("name"), item.get("arguments")
        if not isinstance(name, str):
            raise InvalidRequest(f"'{where}.name' must be a string", param=f"{where}.name")
        if not isinstance(arguments, str):
            raise InvalidRequest(f"'{where}.arguments' must be a string", param=f"{where}.arguments")
        return Turn("assistant", tool_text(name, arguments))
    if kind == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise InvalidRequest(f"'{where}.call_id' must be a string", param=f"{where}.call_id")
        return Turn("user", _output_text(item.get("output"), f"{where}.output"))
    if kind == "item_reference":
        raise InvalidRequest(f"'{where}' refers to a stored item, which is not supported: {_STATELESS}",
                             param=where)
    return None  # reasoning, built-in tool calls and the like: passed on, not judged


def _message_turn(item: dict[str, Any], where: str) -> Turn:
    role = _ROLES.get(str(item.get("role")))
    if role is None:
        raise InvalidRequest(f"'{where}.role' must be 'user', 'assistant', 'system' or 'developer'",
                             param=f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return Turn(role, content)
    if not isinstance(content, list):
        raise InvalidRequest(f"'{where}.content' must be a string or an array of content parts",
                             param=f"{where}.content")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidRequest(f"'{where}.content.{j}' must be a content part with a 'type'",
                                 param=f"{where}.content.{j}")
        text = _part_text(part)
        if text is None:
            raise InvalidRequest(f"'{where}.content.{j}.text' must be a string",
                                 param=f"{where}.content.{j}.text")
        if text:
            texts.append(text)
    return Turn(role, "\n".join(texts))


def _part_text(part: dict[str, Any]) -> str | None:
    """The text of a content part ('' for images and files), None when a text part has none."""
    if part["type"] in ("input_text", "output_text"):
        text = part.get("text")
        return text if isinstance(text, str) else None
    if part["type"] == "refusal":
        refusal = part.get("refusal")
        return refusal if isinstance(refusal, str) else ""
    return ""


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):  # content parts, as tools that return images write it
        return "\n".join(t for p in output if isinstance(p, dict) and isinstance(p.get("type"), str)
                         and (t := _part_text(p)))
    raise InvalidRequest(f"'{where}' must be a string or an array of content parts", param=where)


# --- answers ----------------------------------------------------------------------------------


def answer_text(raw: bytes) -> str:
    """The text of a whole response: its messages' output text and its function calls."""
    try:
        output = orjson.loads(raw)["output"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return ""
    return "\n".join(_output_item_texts(output)) if isinstance(output, list) else ""


def _output_item_texts(output: list[Any]) -> list[str]:
    texts = []
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message" and isinstance(item.get("content"), list):
            texts += [t for p in item["content"] if isinstance(p, dict) and isinstance(p.get("type"), str)
                      and (t := _part_text(p))]
        elif item.get("type") == "function_call" and isinstance(item.get("name"), str):
            texts.append(tool_text(item["name"], str(item.get("arguments") or "")))
        elif item.get("type") == "reasoning" and isinstance(item.get("content"), list):
            texts += [p["text"] for p in item["content"] if isinstance(p, dict)
                      and isinstance(p.get("text"), str) and p["text"]]
    return texts


def event_text(sse: bytes) -> str:
    """The text one streamed event carries: an output text, refusal, reasoning or arguments delta,
    or the head of a function call (its name, on its own line as in `answer_text`)."""
    obj = json_of(sse)
    if obj is None:
        return ""
    kind = obj.get("type")
    if kind in ("response.output_text.delta", "response.function_call_arguments.delta",
                "response.refusal.delta", "response.reasoning_text.delta"):
        delta = obj.get("delta")
        return delta if isinstance(delta, str) else ""
    if kind == "response.output_item.added":
        item = obj.get("item")
        if isinstance(item, dict) and item.get("type") == "function_call" and isinstance(
            item.get("name"), str
        ):
            return "\n" + tool_text(item["name"], "")
    return ""


def response_id_of(sse: bytes) -> str | None:
    """The response id a stream's `response.created` (or any lifecycle) event names, else None."""
    obj = json_of(sse)
    response = obj.get("response") if obj is not None else None
    rid = response.get("id") if isinstance(response, dict) else None
    return rid if isinstance(rid, str) else None


# --- errors and endings -----------------------------------------------------------------------


def error_body(error: LlmgwError) -> bytes:
    """OpenAI's error body, as chat completions writes it."""
    return openai_error_body(error)


def blocked_ending(model: str, error: LlmgwError, sent: SentSoFar = NOTHING_SENT) -> bytes:
    """How a stream the guard stopped ends: an `error` event, then the response's end.

    The `error` event comes first because it is what every Responses client reports as a
    failure with its message: the SDK yields it as a ResponseErrorEvent from both
    `responses.create(stream=True)` and `responses.stream()`, and agents (Codex among them) stop
    on it. Then the lifecycle end: `response.incomplete` with `incomplete_details.reason:
    "content_filter"` for a blocked answer (OpenAI's own reason for filtered output), or
    `response.failed` with the error when the guard could not judge. The SDK's
    `responses.stream()` accumulator checks that this event's response id is the stream's own
    (from `response.created`, the first event `sent`) and raises RuntimeError otherwise; the
    sequence numbers continue the stream's own.
    """
    response_id, sequence_number = response_id_of(sent.first), sent.events
    failed = error.code != "content_filter"
    response = {
        "id": response_id or "resp_blocked",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "failed" if failed else "incomplete",
        "error": {"code": "server_error", "message": error.message} if failed else None,
        "incomplete_details": None if failed else {"reason": "content_filter"},
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    kind = "response.failed" if failed else "response.incomplete"
    return (
        _error_event(error.code, error.message, sequence_number)
        + event({"type": kind, "response": response, "sequence_number": sequence_number + 1}, kind)
    )


def _error_event(code: str | None, message: str, sequence_number: int) -> bytes:
    data = {"type": "error", "code": code, "message": message, "param": None,
            "sequence_number": sequence_number}
    return event(data, "error")


def stream_broke() -> bytes:
    """The `error` event ending a stream whose upstream broke after the first byte."""
    return _error_event("upstream_error", "upstream stream broke", 0)


WIRE = Wire(
    name="openai_responses",
    usage=UsageFormat(
        # The final `response.completed` carries the usage of the whole response.
        prompt=b'"input_tokens"',
        completion=b'"output_tokens"',
        text_markers=(
            b'"type":"response.output_text.delta"',
            b'"type":"response.function_call_arguments.delta"',
        ),
    ),
    read=read,
    answer_text=answer_text,
    event_text=event_text,
    blocked_ending=blocked_ending,
    stream_broke=stream_broke,
    error_body=error_body,
)
