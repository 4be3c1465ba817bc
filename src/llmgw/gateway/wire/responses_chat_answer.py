"""Chat completions answers read back as OpenAI's Responses API: a whole completion as a Response,
a chat stream as the `response.*` event sequence. The request side is in `responses_chat`.

Reasoning an upstream returns (`reasoning_content` or `reasoning` in chat) becomes a reasoning item
with its text as `reasoning_text` content (no summary, no `encrypted_content`); sent back as
input, reasoning items are dropped, as chat templates drop earlier turns' reasoning.
The Response's `tools`, `tool_choice`, `temperature` and the like are defaults, not an echo of the
request (the request is not at hand here).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from llmgw.gateway.wire.sse import DONE, event, json_of


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def _count(value: Any) -> int:
    # Only a plain non-negative integer is shown: an upstream's lie (1e20, -4, "nine") would
    # break this answer's encoding or the SDK's parsing. The meter counts it apart, clamped.
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _detail(usage: dict[str, Any], part: str, name: str) -> int:
    details = usage.get(part)
    return _count(details.get(name)) if isinstance(details, dict) else 0


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": _detail(usage, "prompt_tokens_details", "cached_tokens"),
                                 "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": _detail(usage, "completion_tokens_details", "reasoning_tokens")},
        "total_tokens": _count(usage.get("total_tokens")) or prompt + completion,
    }


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _response(rid: str, created: int, model: str, status: str, output: list[dict[str, Any]],
              usage: dict[str, Any] | None, incomplete: str | None = None,
              error: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": rid, "object": "response", "created_at": created, "status": status,
        "error": error, "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": None, "metadata": {}, "model": model, "output": output,
        # The request's settings are not at hand here; these are the defaults a client sees.
        "parallel_tool_calls": True, "temperature": None, "top_p": None, "tool_choice": "auto",
        "tools": [], "store": False, "usage": usage,
    }


def _message_item(item_id: str, parts: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": parts}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _reasoning_item(item_id: str, parts: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [], "content": parts, "status": status}


# Where each kind of content part keeps its text.
_TEXT_KEY = {"output_text": "text", "refusal": "refusal", "reasoning_text": "text"}


def _reasoning_of(message: dict[str, Any]) -> str:
    """The reasoning a chat message or delta carries: llama.cpp and DeepSeek call it
    `reasoning_content`, vLLM and OpenRouter `reasoning`."""
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str) and message[key]:
            return str(message[key])
    return ""


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def chat_answer_as_response(answer: dict[str, Any], model: str) -> dict[str, Any]:
    """A whole chat completion as a Response object answering for catalog model `model`."""
    choices = answer.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    incomplete = _INCOMPLETE.get(str(choice.get("finish_reason")))
    item_status = "incomplete" if incomplete else "completed"
    output: list[dict[str, Any]] = []
    reasoning = _reasoning_of(message)
    if reasoning:
        output.append(_reasoning_item(_id("rs_"), [{"type": "reasoning_text", "text": reasoning}],
                                      "completed"))
    parts: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        parts.append(_text_part(message["content"]))
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        parts.append({"type": "refusal", "refusal": message["refusal"]})
    if parts:
        output.append(_message_item(_id("msg_"), parts, item_status))
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        output.append(_call_item(_id("fc_"), str(call.get("id") or _id("call_")),
                                 str(function.get("name") or ""), str(function.get("arguments") or ""),
                                 "completed"))
    created = answer.get("created")
    return _response(_id("resp_"), created if isinstance(created, int) else int(time.time()), model,
                     "incomplete" if incomplete else "completed", output, _usage(answer.get("usage")),
                     incomplete)


class _Call:
    """One streamed tool call: announced once its name is known, its arguments held until then."""

    def __init__(self) -> None:
        self.call_id = ""
        self.name = ""
        self.arguments = ""
        self.item_id = _id("fc_")
        self.output_index: int | None = None  # set when announced
        self.open = False


class ChatStreamAsResponses:
    """Turns one chat completions stream into the Responses API's `response.*` event stream.

    Feed it each upstream event as `SseSplitter` cuts them, then call `end` once. Text opens one
    message item (a new one if text resumes after tool calls), reasoning a reasoning item, each tool
    call a function_call item.
    A stream that ends with neither a finish_reason nor `[DONE]` was cut short: it ends in
    `response.failed`, so a client never takes a partial answer for a whole one.
    """

    def __init__(self, model: str) -> None:
        self._model = model
        self._id = _id("resp_")
        self._created = int(time.time())
        self._seq = 0
        self._started = False
        self._finish: str | None = None
        self._done = False
        self._usage: dict[str, Any] | None = None
        self._output: list[dict[str, Any]] = []  # the items, in output_index order
        self._item: dict[str, Any] | None = None  # the open message or reasoning item
        self._item_index = 0
        self._part: dict[str, Any] | None = None  # its open content part
        self._calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}

    def _event(self, name: str, **fields: Any) -> bytes:
        fields["type"] = name
        fields["sequence_number"] = self._seq
        self._seq += 1
        return event(fields, name)

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        response = _response(self._id, self._created, self._model, "in_progress", [], None)
        return [self._event("response.created", response=response),
                self._event("response.in_progress", response=response)]

    def feed(self, upstream: bytes) -> list[bytes]:
        """The Responses events one upstream chat event (without its blank line) completes."""
        out = self._start()
        if upstream.strip() == DONE:
            self._done = True
            return out
        chunk = json_of(upstream)
        if chunk is None:
            return out
        if isinstance(chunk.get("usage"), dict):
            self._usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = _reasoning_of(delta)
            if reasoning:
                out += self._text("reasoning_text", reasoning)
            for kind, key in (("output_text", "content"), ("refusal", "refusal")):
                if isinstance(delta.get(key), str) and delta[key]:
                    out += self._text(kind, delta[key])
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    out += self._call_delta(call)
            if choice.get("finish_reason"):
                self._finish = str(choice["finish_reason"])
        return out

    def _text(self, kind: str, text: str) -> list[bytes]:
        item_type = "reasoning" if kind == "reasoning_text" else "message"
        out = self._close_calls("completed")
        if self._item is not None and self._item["type"] != item_type:
            out += self._close_item("completed")
        if self._item is None:
            self._item = (_message_item(_id("msg_"), [], "in_progress") if item_type == "message"
                          else _reasoning_item(_id("rs_"), [], "in_progress"))
            self._item_index = len(self._output)
            self._output.append(self._item)
            out.append(self._event("response.output_item.added", output_index=self._item_index,
                                   item={**self._item, "content": []}))
        if self._part is not None and self._part["type"] != kind:
            out += self._close_part()
        where = {"item_id": self._item["id"], "output_index": self._item_index}
        if self._part is None:
            self._part = {"type": kind, _TEXT_KEY[kind]: ""}
            if kind == "output_text":
                self._part.update(annotations=[], logprobs=[])
            self._item["content"].append(self._part)
            out.append(self._event("response.content_part.added", **where,
                                   content_index=len(self._item["content"]) - 1, part=dict(self._part)))
        self._part[_TEXT_KEY[kind]] += text
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        out.append(self._event(f"response.{kind}.delta", **where,
                               content_index=len(self._item["content"]) - 1, delta=text, **extra))
        return out

    def _close_part(self) -> list[bytes]:
        part, self._part = self._part, None
        if part is None or self._item is None:
            return []
        where = {"item_id": self._item["id"], "output_index": self._item_index,
                 "content_index": len(self._item["content"]) - 1}
        kind = part["type"]
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        done = self._event(f"response.{kind}.done", **where, **{_TEXT_KEY[kind]: part[_TEXT_KEY[kind]]},
                           **extra)
        return [done, self._event("response.content_part.done", **where, part=part)]

    def _close_item(self, status: str) -> list[bytes]:
        if self._item is None:
            return []
        out = self._close_part()
        item, self._item = self._item, None
        item["status"] = status
        out.append(self._event("response.output_item.done", output_index=self._item_index, item=item))
        return out

    def _call_delta(self, delta: dict[str, Any]) -> list[bytes]:
        out = self._close_item("completed")
        index = delta.get("index")
        if not isinstance(index, int):
            # Some upstreams leave out the index: a new id starts a new call, else the last goes on.
            same = [i for i, c in self._by_index.items() if delta.get("id") and c.call_id == delta["id"]]
            if same:
                index = same[0]
            elif delta.get("id") or not self._by_index:
                index = -1 - len(self._by_index)  # below every index an upstream numbers itself
            else:
                index = list(self._by_index)[-1]
        call = self._by_index.get(index)
        if call is None:
            call = self._by_index[index] = _Call()
            self._calls.append(call)
        function = delta.get("function") or {}
        if not call.call_id and isinstance(delta.get("id"), str):
            call.call_id = delta["id"]
        if not call.name and isinstance(function.get("name"), str):
            call.name = function["name"]
        raw = function.get("arguments")
        fragment = raw if isinstance(raw, str) else ""
        call.arguments += fragment
        if call.output_index is None and call.name:
            out += self._announce(call)
        elif call.open and fragment:
            out.append(self._event("response.function_call_arguments.delta", item_id=call.item_id,
                                   output_index=call.output_index, delta=fragment))
        return out

    def _announce(self, call: _Call) -> list[bytes]:
        call.call_id = call.call_id or _id("call_")
        call.output_index = len(self._output)
        call.open = True
        self._output.append(_call_item(call.item_id, call.call_id, call.name, "", "in_progress"))
        out = [self._event("response.output_item.added", output_index=call.output_index,
                           item=dict(self._output[call.output_index]))]
        if call.arguments:
            out.append(self._event("response.function_call_arguments.delta", item_id=call.item_id,
                                   output_index=call.output_index, delta=call.arguments))
        return out

    def _close_calls(self, status: str) -> list[bytes]:
        out: list[bytes] = []
        for call in self._calls:
            if not call.open or call.output_index is None:
                continue
            call.open = False
            item = _call_item(call.item_id, call.call_id, call.name, call.arguments, status)
            self._output[call.output_index] = item
            out.append(self._event("response.function_call_arguments.done", item_id=call.item_id,
                                   output_index=call.output_index, arguments=call.arguments))
            out.append(self._event("response.output_item.done", output_index=call.output_index, item=item))
        return out

    def end(self) -> list[bytes]:
        """The events that finish the stream: open items done, then the response's last event."""
        out = self._start()
        cut = self._finish is None and not self._done
        incomplete = _INCOMPLETE.get(self._finish or "")
        status = "incomplete" if cut or incomplete else "completed"
        out += self._close_item(status)
        for call in self._calls:
            if call.output_index is None:  # never named: still a call the client must see
                out += self._announce(call)
        out += self._close_calls(status)
        if cut:
            error = {"code": "server_error", "message": "The upstream ended the stream before it finished."}
            response = _response(self._id, self._created, self._model, "failed", self._output,
                                 self._usage, error=error)
            return [*out, self._event("response.failed", response=response)]
        response = _response(self._id, self._created, self._model, status, self._output, self._usage,
                             incomplete)
        name = "response.incomplete" if incomplete else "response.completed"
        return [*out, self._event(name, response=response)]
