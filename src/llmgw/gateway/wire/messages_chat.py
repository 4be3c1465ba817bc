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
- Answers: see `messages_chat_answer`, re-exported here.
"""

from __future__ import annotations

from typing import Any

from llmgw.core.errors import InvalidRequest
from llmgw.gateway.wire.messages_chat_answer import (
    UNPARSED_ARGUMENTS,
    ChatStreamAsMessages,
    MessageIdStream,
    MessagesStreamAsChat,
    call_of,
    chat_answer_as_message,
    message_answer_as_chat,
    renamed_message,
    tool_input,
)

__all__ = ["UNPARSED_ARGUMENTS", "ChatStreamAsMessages", "MessageIdStream", "MessagesStreamAsChat",
           "chat_answer_as_message", "chat_to_messages", "message_answer_as_chat", "messages_to_chat",
           "renamed_message"]

# Anthropic requires max_tokens; a chat request may leave it out.
DEFAULT_MAX_TOKENS = 4096

_MESSAGES_HINTS = {"metadata", "cache_control", "service_tier", "top_k", "thinking",
                   "context_management", "speed", "inference_geo", "diagnostics"}
_CHAT_HINTS = {"user", "store", "metadata", "service_tier", "seed", "stream_options",
               "frequency_penalty", "presence_penalty", "prediction", "reasoning_effort",
               "prompt_cache_key", "safety_identifier"}

def _refuse(param: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{what} cannot be carried to this model's upstream", param=param)


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
            calls.append(call_of(block))
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
                       "input": tool_input(function.get("arguments"))})
    return blocks
