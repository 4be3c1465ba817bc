"""Anthropic Messages ⇄ OpenAI chat completions, for a model whose upstream does not speak the
client's dialect: requests, whole answers and streams, on parsed JSON and SSE event bytes.

What cannot be carried raises InvalidRequest naming the field (server tools, documents other than
plain text, images in tool results or assistant turns, n > 1, logprobs, logit_bias, audio, JSON
mode without a schema, unknown fields). These are dropped silently, as hints that do not change
what is asked:
- Messages → chat: `cache_control` (top level, blocks, tools), `metadata`, `service_tier`,
  `top_k`, `thinking` and `thinking`/`redacted_thinking` blocks of earlier turns,
  `context_management`, `output_config.effort`, `speed`, `inference_geo`, `diagnostics`, a
  tool's fields other than name, description, input_schema and strict; a tool result's
  `is_error` becomes an "Error: " before its text, and a user turn's tool results go ahead of
  its other content (chat wants them right after the tool calls).
- chat → Messages: `user`, `name` on messages, `store`, `metadata`, `service_tier`, `seed`,
  `stream_options` (usage always reaches the client), `frequency_penalty`, `presence_penalty`,
  `prediction`, `reasoning_effort`, `prompt_cache_key`, `safety_identifier`, an image's `detail`;
  a temperature above 1 is lowered to 1, Anthropic's highest.
- Answers: reasoning text (`reasoning_content`, thinking blocks, signatures), citations; chat
  cannot say which stop sequence matched, so a chat stop reads as `end_turn`. Tool arguments
  that are not a JSON object reach a Messages client under UNPARSED_ARGUMENTS (see there).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson

from llmgw.core.errors import InvalidRequest, UpstreamError
from llmgw.gateway.wire.sse import DONE, event, json_of

# Anthropic requires max_tokens; a chat request may leave it out.
DEFAULT_MAX_TOKENS = 4096

# Arguments that are not a JSON object: kept under this key rather than dropped for `{}`, so a tool
# whose parameters all have defaults does not run as if called without any, and the client's
# schema check (and the model, in the tool's error) can see what went wrong.
UNPARSED_ARGUMENTS = "_unparsed_arguments"

_MESSAGES_HINTS = {"metadata", "cache_control", "service_tier", "top_k", "thinking",
                   "context_management", "speed", "inference_geo", "diagnostics"}
_CHAT_HINTS = {"user", "store", "metadata", "service_tier", "seed", "stream_options",
               "frequency_penalty", "presence_penalty", "prediction", "reasoning_effort",
               "prompt_cache_key", "safety_identifier"}

_TO_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                      "function_call": "tool_use", "content_filter": "refusal"}
_TO_CHAT_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
                   "max_tokens": "length", "model_context_window_exceeded": "length",
                   "tool_use": "tool_calls", "refusal": "content_filter"}


def _refuse(param: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{what} cannot be carried to this model's upstream", param=param)


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def _tool_input(arguments: Any) -> dict[str, Any]:
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


def _call_of(block: dict[str, Any]) -> dict[str, Any]:
    """A tool_use block as a chat tool call."""
    return {"id": block.get("id"), "type": "function",
            "function": {"name": block.get("name"), "arguments": _dumps(block.get("input", {}))}}


def _text_of(blocks: Any, param: str) -> str:
    """The text of a string or a list of text blocks/parts (system prompts, tool results)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise InvalidRequest("must be a string or a list of text blocks", param=param)
    texts = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(
                block.get("text"), str):
            raise _refuse(f"{param}[{i}]", "a block other than text")
        texts.append(block["text"])
    return "\n".join(texts)


# ---------------------------------------------------------------------------------- requests


def messages_to_chat(payload: dict[str, Any], model: str) -> dict[str, Any]:
    """An Anthropic Messages request as a chat completions request for upstream model `model`."""
    out: dict[str, Any] = {"model": model}
    messages: list[dict[str, Any]] = []
    for key, value in payload.items():
        if key in _MESSAGES_HINTS or key in ("model", "messages"):
            continue
        if key == "system":
            text = _text_of(value, "system")
            if text:
                messages.append({"role": "system", "content": text})
        elif key == "max_tokens":
            out["max_tokens"] = value
        elif key in ("temperature", "top_p"):
            out[key] = value
        elif key == "stop_sequences":
            if value:
                out["stop"] = list(value)
        elif key == "stream":
            out["stream"] = bool(value)
            if value:
                out["stream_options"] = {"include_usage": True}
        elif key == "tools":
            out["tools"] = [_tool_to_chat(tool, f"tools[{i}]") for i, tool in enumerate(value or [])]
        elif key == "tool_choice":
            _tool_choice_to_chat(value, out)
        elif key == "output_config":
            _output_config_to_chat(value, out)
        else:
            raise _refuse(key, f"the field {key!r}")
    for i, message in enumerate(payload["messages"]):
        messages.extend(_message_to_chat(message, f"messages[{i}]"))
    out["messages"] = messages
    return out


def _tool_to_chat(tool: Any, param: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") not in (None, "custom") or "name" not in tool:
        raise _refuse(param, "a server tool")
    function: dict[str, Any] = {"name": tool["name"],
                                "parameters": tool.get("input_schema") or {"type": "object"}}
    if tool.get("description"):
        function["description"] = tool["description"]
    if "strict" in tool:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _tool_choice_to_chat(choice: Any, out: dict[str, Any]) -> None:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool" and isinstance(choice, dict) and choice.get("name"):
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    else:
        raise _refuse("tool_choice", "this tool_choice")
    if isinstance(choice, dict) and choice.get("disable_parallel_tool_use") and kind != "none":
        out["parallel_tool_calls"] = False


def _output_config_to_chat(config: Any, out: dict[str, Any]) -> None:
    if not isinstance(config, dict):
        raise InvalidRequest("must be an object", param="output_config")
    fmt = config.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or "schema" not in fmt:
        raise _refuse("output_config.format", "this output format")
    out["response_format"] = {"type": "json_schema",
                              "json_schema": {"name": "output", "schema": fmt["schema"]}}


def _image_url(source: Any, param: str) -> str:
    if isinstance(source, dict) and source.get("type") == "base64":
        return f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    if isinstance(source, dict) and source.get("type") == "url" and isinstance(source.get("url"), str):
        return str(source["url"])
    raise _refuse(f"{param}.source", "an image source other than base64 or url")


def _message_to_chat(message: Any, param: str) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages: a user turn's tool results become `tool` messages
    ahead of its other content, as chat wants them right after the assistant's tool calls."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise InvalidRequest("each message needs role user or assistant", param=f"{param}.role")
    role, content = message["role"], message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise InvalidRequest("content must be a string or a list of blocks", param=f"{param}.content")
    tools: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        where = f"{param}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise InvalidRequest("a text block needs its text", param=f"{where}.text")
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and role == "user":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block.get("source"), where)}})
        elif kind == "document" and role == "user":
            source = block.get("source")
            if not (isinstance(source, dict) and source.get("type") == "text"):
                raise _refuse(where, "a document other than plain text")
            parts.append({"type": "text", "text": str(source.get("data", ""))})
        elif kind == "tool_result" and role == "user":
            text = _text_of(block.get("content", ""), f"{where}.content")
            if block.get("is_error"):
                # chat has no error flag on tool results: say it in the text the model reads
                text = f"Error: {text}"
            tools.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text})
        elif kind == "tool_use" and role == "assistant":
            calls.append(_call_of(block))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue
        else:
            raise _refuse(where, f"a {kind or 'malformed'} block in a {role} message")
    out: list[dict[str, Any]] = list(tools)
    if role == "assistant":
        text = "".join(p["text"] for p in parts)
        if text or calls:
            reply: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                reply["tool_calls"] = calls
            out.append(reply)
    elif parts:
        single = len(parts) == 1 and parts[0]["type"] == "text"
        out.append({"role": "user", "content": parts[0]["text"] if single else parts})
    return out


def chat_to_messages(payload: dict[str, Any], model: str) -> dict[str, Any]:
    """A chat completions request as an Anthropic Messages request for upstream model `model`."""
    out: dict[str, Any] = {"model": model}
    parallel = True
    for key, value in payload.items():
        if key in _CHAT_HINTS or key in ("model", "messages", "max_tokens", "max_completion_tokens"):
            continue
        if key == "temperature":
            if isinstance(value, int | float):
                out["temperature"] = min(value, 1.0)
            elif value is not None:
                out["temperature"] = value
        elif key in ("top_p", "top_k"):
            if value is not None:
                out[key] = value
        elif key == "stop":
            if value:
                out["stop_sequences"] = [value] if isinstance(value, str) else list(value)
        elif key == "stream":
            out["stream"] = bool(value)
        elif key == "n":
            if value not in (None, 1):
                raise InvalidRequest("n > 1 cannot be carried to this model's upstream", param="n")
        elif key == "tools":
            out["tools"] = [_tool_to_messages(tool, f"tools[{i}]") for i, tool in enumerate(value or [])]
        elif key == "tool_choice":
            if value is not None:
                out["tool_choice"] = _tool_choice_to_messages(value)
        elif key == "parallel_tool_calls":
            parallel = value is not False
        elif key == "response_format":
            _response_format_to_messages(value, out)
        elif key in ("logprobs", "top_logprobs", "logit_bias") and not value:
            continue
        else:
            raise _refuse(key, f"the field {key!r}")
    limit = payload.get("max_completion_tokens") or payload.get("max_tokens")
    out["max_tokens"] = limit if isinstance(limit, int) else DEFAULT_MAX_TOKENS
    if not parallel and out.get("tools"):
        choice = out.setdefault("tool_choice", {"type": "auto"})
        if choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True
    system, messages = _chat_messages_to_messages(payload["messages"])
    if system:
        out["system"] = system
    out["messages"] = messages
    return out


def _tool_to_messages(tool: Any, param: str) -> dict[str, Any]:
    function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
    if not isinstance(function, dict) or not function.get("name"):
        raise _refuse(param, "a tool other than a function")
    out: dict[str, Any] = {"name": function["name"],
                           "input_schema": function.get("parameters") or {"type": "object", "properties": {}}}
    if function.get("description"):
        out["description"] = function["description"]
    if function.get("strict") is not None:
        out["strict"] = function["strict"]
    return out


def _tool_choice_to_messages(choice: Any) -> dict[str, Any]:
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    function = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(function, dict) and function.get("name"):
        return {"type": "tool", "name": function["name"]}
    raise _refuse("tool_choice", "this tool_choice")


def _response_format_to_messages(fmt: Any, out: dict[str, Any]) -> None:
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in (None, "text"):
        return
    schema = fmt.get("json_schema") if isinstance(fmt, dict) else None
    if kind != "json_schema" or not isinstance(schema, dict) or not isinstance(schema.get("schema"), dict):
        raise _refuse("response_format", "a JSON mode without a schema")
    out["output_config"] = {"format": {"type": "json_schema", "schema": schema["schema"]}}


def _chat_messages_to_messages(messages: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """System text, and the turns with consecutive same-role ones merged, as Anthropic requires
    roles to alternate (tool results are user turns there)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            # Anthropic has one system prompt: a mid-conversation one joins it
            system.append(_text_of(message.get("content") or "", f"{param}.content"))
            continue
        if role == "tool":
            text = _text_of(message.get("content") or "", f"{param}.content")
            blocks = [{"type": "tool_result", "tool_use_id": message.get("tool_call_id"), "content": text}]
            role = "user"
        elif role == "user":
            blocks = _user_blocks(message.get("content"), f"{param}.content")
        elif role == "assistant":
            blocks = _assistant_blocks(message, param)
        else:
            raise InvalidRequest("unknown message role", param=f"{param}.role")
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if len(turn["content"]) == 1 and turn["content"][0]["type"] == "text":
            turn["content"] = turn["content"][0]["text"]
    return "\n\n".join(s for s in system if s), turns


def _user_blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest("content must be a string or a list of parts", param=param)
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if part.get("text"):
                blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            url = part["image_url"].get("url") if isinstance(part.get("image_url"), dict) else None
            blocks.append({"type": "image", "source": _image_source(url, f"{param}[{j}].image_url.url")})
        else:
            raise _refuse(f"{param}[{j}]", f"a {kind or 'malformed'} content part")
    return blocks


def _image_source(url: Any, param: str) -> dict[str, Any]:
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return {"type": "base64", "media_type": head, "data": data}
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        return {"type": "url", "url": url}
    raise _refuse(param, "an image URL other than http(s) or base64 data")


def _assistant_blocks(message: dict[str, Any], param: str) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text") or p.get("refusal") or "")
                          for p in content if isinstance(p, dict))
    elif content is not None and not isinstance(content, str):
        raise InvalidRequest("content must be a string or a list of parts", param=f"{param}.content")
    blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    for j, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise _refuse(f"{param}.tool_calls[{j}]", "a tool call other than a function")
        blocks.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                       "input": _tool_input(function.get("arguments"))})
    return blocks


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


def _message_id(upstream: Any) -> str:
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
                        "input": _tool_input(function.get("arguments"))})
    if not content:
        # clients commonly read content[0]; an empty text block keeps that working
        content.append({"type": "text", "text": ""})
    stop = _stop_reason(choices[0].get("finish_reason"), bool(calls))
    return {"id": _message_id(answer.get("id")), "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": _usage_to_messages(answer.get("usage"))}


def message_answer_as_chat(answer: dict[str, Any], model: str) -> dict[str, Any]:
    """A whole Anthropic message as a chat completion."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in _objs(answer.get("content")):
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            calls.append(_call_of(block))
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
        message: dict[str, Any] = {"id": _message_id(upstream_id), "type": "message", "role": "assistant",
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
                                                 "arguments": _dumps(initial) if initial else ""}}
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
