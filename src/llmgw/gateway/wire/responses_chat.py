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
`reasoning.effort` is sent as chat's `reasoning_effort`.

Answers come back through `chat_answer_as_response` and `ChatStreamAsResponses`, which live in
`responses_chat_answer` and are named here too, so one module is the whole translation.
"""

from __future__ import annotations

import re
from typing import Any

from llmgw.core.errors import InvalidRequest
from llmgw.gateway.wire.responses_chat_answer import ChatStreamAsResponses, chat_answer_as_response

__all__ = ["ChatStreamAsResponses", "chat_answer_as_response", "responses_to_chat"]

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


def _shown(name: Any) -> str:
    """A type or field name the client sent, quoted only when it looks like one (never echo data)."""
    return f"'{name}'" if isinstance(name, str) and re.fullmatch(r"[a-z][a-z0-9_.]{0,47}", name) else "this"


def _refuse(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message + " (this model's upstream speaks only chat completions)", param=param)


def _check_fields(payload: dict[str, Any]) -> None:
    for key, value in payload.items():
        if value is None or key in _HINTS:
            continue
        if key not in _CARRIED:
            raise _refuse(f"the field {_shown(key)} is not supported", key[:64])
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
            raise _refuse(f"'include' of {_shown(name)} is not supported", f"include[{i}]")


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
            raise _refuse(f"a content part of type {_shown(kind)} is not supported here", f"{param}[{j}]")
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
            if part.get("file_id") is not None:
                raise _refuse("images are supported by 'image_url' only, not 'file_id'", f"{where}.file_id")
            if not isinstance(part.get("image_url"), str):
                raise InvalidRequest("an input_image part needs an 'image_url'", param=f"{where}.image_url")
            image: dict[str, Any] = {"url": part["image_url"]}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise _refuse(f"a content part of type {_shown(kind)} is not supported", where)
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
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidRequest("'instructions' must be a string", param="instructions")
    if instructions:
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
            message = _message(item, where)
            last = messages[-1] if messages else None
            if (message["role"] == "assistant" and last is not None and last.get("tool_calls")
                    and not last["content"]):
                # Text written after calls in one turn: chat wants the calls' results next, so the
                # text joins the calls' message instead of standing between them and their results.
                last["content"] = message["content"]
            else:
                messages.append(message)
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
            raise _refuse(f"input items of type {_shown(kind)} are not supported", f"{where}.type")
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
        raise _refuse(f"tools of type {_shown(kind)} are not supported, only 'function'", f"{where}.type")
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
            raise _refuse(f"a 'tool_choice' of type {_shown(kind)} is not supported", "tool_choice")
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
        raise _refuse(f"a 'text.format' of type {_shown(fmt.get('type'))} is not supported",
                      "text.format.type")


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
    if reasoning is not None and not isinstance(reasoning, dict):
        raise InvalidRequest("'reasoning' must be an object", param="reasoning")
    if reasoning and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    if payload.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat
