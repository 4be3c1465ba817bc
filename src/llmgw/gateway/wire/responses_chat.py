"""OpenAI's Responses API carried over chat completions, for upstreams that speak only chat.

`responses_to_chat` writes a Responses request as a chat request; `chat_answer_as_response` reads a
whole chat completion back as a Response; `ChatStreamAsResponses` turns a chat stream into the
`response.*` event sequence. Nothing is stored: every request must carry its whole conversation.

Refused with a 400 naming the field (dropping them would change what the client gets):
`previous_response_id`, `conversation`, `store: true`, `background: true`, `prompt` (stored
templates), `moderation`, `max_tool_calls`, `top_logprobs` and `include` of output logprobs,
tools other than `function` (web_search, file_search, computer_use, mcp, code_interpreter,
image_generation, custom, shell, ...) and a `tool_choice` naming one, `item_reference` and every
input item other than messages, function calls, their outputs and reasoning, images given by
`file_id`, `input_file` parts, images in a function call's output, unknown request fields.

Dropped as hints that do not change the answer's meaning: `metadata`, `user`,
`safety_identifier`, `prompt_cache_key`, `prompt_cache_options`, `prompt_cache_retention`,
`service_tier`, `stream_options`, `access_programs`, `image`, `background_options`, `store: false`,
`include` of encrypted reasoning or hosted tools' results (there are none to include),
`text.verbosity`, `reasoning.summary`, `truncation` and `context_management` (an overlong
conversation fails upstream instead of being shortened), an item's `id` and `status`, and
`reasoning` input items (chat templates drop earlier turns' reasoning, so the model sees the same).
`reasoning.effort` is sent as chat's `reasoning_effort`; reasoning the upstream returns is not
passed on (a chat answer's `reasoning_content` has no place in this translation's output).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from llmgw.core.errors import InvalidRequest
from llmgw.gateway.wire.sse import DONE, event, json_of

# Request fields read into the chat request (or checked and found harmless).
_CARRIED = frozenset({
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
    "max_output_tokens", "temperature", "top_p", "text", "reasoning", "stream", "store",
    "background", "include", "top_logprobs",
})
_HINTS = frozenset({
    "metadata", "user", "safety_identifier", "prompt_cache_key", "prompt_cache_options",
    "prompt_cache_retention", "service_tier", "stream_options", "truncation", "context_management",
    "access_programs", "image", "background_options",
})
# `include` values that ask for output this translation never produces, so asking changes nothing.
_HARMLESS_INCLUDES = frozenset({
    "reasoning.encrypted_content", "file_search_call.results", "web_search_call.results",
    "web_search_call.action.sources", "message.input_image.image_url",
    "computer_call_output.output.image_url", "code_interpreter_call.outputs",
})


def _refuse(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message + " (this model's upstream speaks only chat completions)", param=param)


def _check_fields(payload: dict[str, Any]) -> None:
    for key, value in payload.items():
        if value is None or key in _HINTS:
            continue
        if key not in _CARRIED:
            raise _refuse(f"'{key}' is not supported for this model", key)
    if payload.get("previous_response_id") is not None:
        raise _refuse("'previous_response_id' is not supported: send the whole conversation in 'input'",
                      "previous_response_id")
    if payload.get("conversation") is not None:
        raise _refuse("'conversation' is not supported: send the whole conversation in 'input'",
                      "conversation")
    if payload.get("store") is True:
        raise _refuse("responses are not stored: set 'store' to false", "store")
    if payload.get("background") is True:
        raise _refuse("background responses are not supported", "background")
    if payload.get("top_logprobs"):
        raise _refuse("'top_logprobs' is not supported", "top_logprobs")
    include = payload.get("include") or []
    if not isinstance(include, list):
        raise InvalidRequest("'include' must be an array", param="include")
    for i, name in enumerate(include):
        if name not in _HARMLESS_INCLUDES:
            raise _refuse(f"'include' of {name!r} is not supported" if isinstance(name, str)
                          else "'include' holds strings", f"include[{i}]")


def _text_of_parts(parts: Any, param: str, allowed: tuple[str, ...]) -> str:
    """The text of a content that must be text only (a string or text parts)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        raise InvalidRequest("content must be a string or an array of parts", param=param)
    texts: list[str] = []
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            raise _refuse(f"a {kind!r} part is not supported here", f"{param}[{j}]")
        key = "refusal" if kind == "refusal" else "text"
        text = part.get(key)
        if not isinstance(text, str):
            raise InvalidRequest(f"a {kind} part needs a string '{key}'", param=f"{param}[{j}].{key}")
        texts.append(text)
    return "".join(texts)


def _user_content(content: Any, param: str) -> str | list[dict[str, Any]]:
    """A user message's content as chat parts: text, and images given by URL."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest("content must be a string or an array of parts", param=param)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        where = f"{param}[{j}]"
        if kind in ("input_text", "output_text"):
            if not isinstance(part.get("text"), str):
                raise InvalidRequest("a text part needs a string 'text'", param=f"{where}.text")
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            if part.get("file_id") is not None or not isinstance(part.get("image_url"), str):
                raise _refuse("images are supported by 'image_url' only, not 'file_id'", f"{where}.file_id")
            image: dict[str, Any] = {"url": part["image_url"]}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise _refuse(f"a {kind!r} part is not supported", where)
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _tool_output(output: Any, param: str) -> str:
    if isinstance(output, str):
        return output
    # Chat's tool messages carry text only, so an image a tool returned cannot reach the model.
    return _text_of_parts(output, param, ("input_text", "output_text"))


def _messages(payload: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    instructions = payload.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    items = payload.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    if not isinstance(items, list):
        raise InvalidRequest("'input' must be a string or an array of items", param="input")
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidRequest("an input item must be an object", param=where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            messages.append(_message(item, where))
        elif kind == "function_call":
            call = {"id": _string(item, "call_id", where), "type": "function",
                    "function": {"name": _string(item, "name", where),
                                 "arguments": _string(item, "arguments", where)}}
            last = messages[-1] if messages else None
            # One assistant turn: its text and the calls that follow it, as a chat model wrote them.
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": _string(item, "call_id", where),
                             "content": _tool_output(item.get("output"), f"{where}.output")})
        elif kind == "reasoning":
            continue
        else:
            raise _refuse(f"input items of type {kind!r} are not supported", f"{where}.type")
    return messages


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise InvalidRequest(f"'{key}' must be a string", param=f"{where}.{key}")
    return value


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    content = item.get("content")
    param = f"{where}.content"
    if role == "user":
        return {"role": "user", "content": _user_content(content, param)}
    if role in ("system", "developer"):
        # `developer` is what newer OpenAI models call the system role; chat upstreams know `system`.
        return {"role": "system", "content": _text_of_parts(content, param, ("input_text",))}
    if role == "assistant":
        # A refusal the assistant gave earlier is what it said, so the model sees it as its text.
        text = _text_of_parts(content, param, ("output_text", "input_text", "refusal"))
        return {"role": "assistant", "content": text}
    raise InvalidRequest("a message's 'role' must be user, assistant, system or developer",
                         param=f"{where}.role")


def _function_tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise _refuse(f"tools of type {kind!r} are not supported, only 'function'", f"{where}.type")
    function: dict[str, Any] = {"name": _string(tool, "name", where)}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def _tools(payload: dict[str, Any], chat: dict[str, Any]) -> None:
    tools = payload.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array", param="tools")
    chat_tools = [_function_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools or [])]
    choice = payload.get("tool_choice")
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise InvalidRequest("'tool_choice' must be none, auto, required or an object",
                                 param="tool_choice")
        chat["tool_choice"] = choice
    elif isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function":
            chat["tool_choice"] = {"type": "function",
                                   "function": {"name": _string(choice, "name", "tool_choice")}}
        elif kind == "allowed_tools" and choice.get("mode") in ("auto", "required"):
            # Offering only the allowed tools means the same to the model, on any chat upstream.
            allowed = choice.get("tools")
            if not isinstance(allowed, list) or any(
                    not isinstance(t, dict) or t.get("type") != "function" for t in allowed):
                raise _refuse("'allowed_tools' may name function tools only", "tool_choice.tools")
            names = {t.get("name") for t in allowed}
            chat_tools = [t for t in chat_tools if t["function"]["name"] in names]
            chat["tool_choice"] = choice["mode"]
        else:
            raise _refuse(f"a 'tool_choice' of type {kind!r} is not supported", "tool_choice")
    elif choice is not None:
        raise InvalidRequest("'tool_choice' must be a string or an object", param="tool_choice")
    if chat_tools:
        chat["tools"] = chat_tools
    if isinstance(payload.get("parallel_tool_calls"), bool) and chat_tools:
        chat["parallel_tool_calls"] = payload["parallel_tool_calls"]


def _text_format(payload: dict[str, Any], chat: dict[str, Any]) -> None:
    text = payload.get("text")
    if text is None:
        return
    if not isinstance(text, dict):
        raise InvalidRequest("'text' must be an object", param="text")
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return
    if not isinstance(fmt, dict):
        raise InvalidRequest("'text.format' must be an object", param="text.format")
    if fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif fmt.get("type") == "json_schema":
        schema: dict[str, Any] = {"name": _string(fmt, "name", "text.format")}
        for key in ("schema", "description", "strict"):
            if fmt.get(key) is not None:
                schema[key] = fmt[key]
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    else:
        raise _refuse(f"a 'text.format' of type {fmt.get('type')!r} is not supported", "text.format.type")


def responses_to_chat(payload: dict[str, Any], model: str) -> dict[str, Any]:
    """A Responses request as a chat completions request for upstream model `model`."""
    _check_fields(payload)
    chat: dict[str, Any] = {"model": model, "messages": _messages(payload)}
    _tools(payload, chat)
    _text_format(payload, chat)
    if payload.get("max_output_tokens") is not None:
        chat["max_tokens"] = payload["max_output_tokens"]
    for key in ("temperature", "top_p"):
        if payload.get(key) is not None:
            chat[key] = payload[key]
    reasoning = payload.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    if payload.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": int(cached), "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": int(reasoning)},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
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


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


def chat_answer_as_response(answer: dict[str, Any], model: str) -> dict[str, Any]:
    """A whole chat completion as a Response object answering for catalog model `model`."""
    choices = answer.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    incomplete = _INCOMPLETE.get(str(choice.get("finish_reason")))
    item_status = "incomplete" if incomplete else "completed"
    output: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        parts.append(_text_part(message["content"]))
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        parts.append({"type": "refusal", "refusal": message["refusal"]})
    if parts:
        output.append(_message_item(_id("msg_"), parts, item_status))
    for call in message.get("tool_calls") or []:
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
    message item (a new one if text resumes after tool calls), each tool call a function_call item.
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
        self._message: dict[str, Any] | None = None  # the open message item
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
        out = self._close_calls("completed")
        if self._message is None:
            self._message = _message_item(_id("msg_"), [], "in_progress")
            self._output.append(self._message)
            out.append(self._event("response.output_item.added", output_index=len(self._output) - 1,
                                   item={**self._message, "content": []}))
        where = {"item_id": self._message["id"], "output_index": len(self._output) - 1}
        if self._part is not None and self._part["type"] != kind:
            out += self._close_part()
        if self._part is None:
            self._part = _text_part("") if kind == "output_text" else {"type": "refusal", "refusal": ""}
            self._message["content"].append(self._part)
            out.append(self._event("response.content_part.added", **where,
                                   content_index=len(self._message["content"]) - 1, part=dict(self._part)))
        index = len(self._message["content"]) - 1
        if kind == "output_text":
            self._part["text"] += text
            out.append(self._event("response.output_text.delta", **where, content_index=index,
                                   delta=text, logprobs=[]))
        else:
            self._part["refusal"] += text
            out.append(self._event("response.refusal.delta", **where, content_index=index, delta=text))
        return out

    def _close_part(self) -> list[bytes]:
        part, self._part = self._part, None
        if part is None or self._message is None:
            return []
        where = {"item_id": self._message["id"], "output_index": len(self._output) - 1,
                 "content_index": len(self._message["content"]) - 1}
        if part["type"] == "output_text":
            done = self._event("response.output_text.done", **where, text=part["text"], logprobs=[])
        else:
            done = self._event("response.refusal.done", **where, refusal=part["refusal"])
        return [done, self._event("response.content_part.done", **where, part=part)]

    def _close_message(self, status: str) -> list[bytes]:
        if self._message is None:
            return []
        out = self._close_part()
        message, self._message = self._message, None
        message["status"] = status
        out.append(self._event("response.output_item.done", output_index=self._output.index(message),
                               item=message))
        return out

    def _call_delta(self, delta: dict[str, Any]) -> list[bytes]:
        out = self._close_message("completed")
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
        out += self._close_message(status)
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
