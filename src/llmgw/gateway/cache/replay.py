"""A kept answer told again, in the caller's dialect, whole or as a stream: made as a chat
completion (its events, when streamed), and carried to Anthropic's Messages or OpenAI's
Responses through the translation table that carries an upstream's answers
(`translate.from_chat`)."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from llmgw.gateway.cache.entry import CachedAnswer
from llmgw.gateway.call import Reply, Stream
from llmgw.gateway.wire import translate
from llmgw.gateway.wire.dialect import Api

SSE = "text/event-stream"


def replay(answer: CachedAnswer, api: Api, model: str, stream: bool, usage: bool) -> Reply:
    """`answer` as the reply to a request of `api` naming `model`: streamed when `stream`, its
    usage in a chat stream only when the client asked for it (`usage`)."""
    translation = translate.from_chat(api)
    if not stream:
        chat = _chat(answer, model)
        return Reply(body=orjson.dumps(chat if translation is None
                                       else translation.answer(chat, model)))
    events = _chat_events(answer, model, usage or api != Api.CHAT)
    translator = None if translation is None else translation.stream(model)
    if translator is None:
        body = b"".join(e + b"\n\n" for e in events)
    else:
        body = b"".join([out for e in events for out in translator.feed(e)] + translator.end())
    return Reply(content_type=SSE, stream=_whole_stream(body))


def _chat(answer: CachedAnswer, model: str) -> dict[str, Any]:
    return {"id": _id(), "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text},
                         "finish_reason": answer.finish}],
            "usage": _usage(answer)}


def _chat_events(answer: CachedAnswer, model: str, usage: bool) -> list[bytes]:
    """The chat completion chunks of `answer` (each `data: …` without its blank line)."""
    head = {"id": _id(), "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model}

    def chunk(choices: list[dict[str, Any]], **more: Any) -> bytes:
        return b"data: " + orjson.dumps({**head, "choices": choices, **more})

    events = [chunk([{"index": 0, "delta": {"role": "assistant", "content": ""},
                      "finish_reason": None}])]
    if answer.text:
        events.append(chunk([{"index": 0, "delta": {"content": answer.text},
                              "finish_reason": None}]))
    events.append(chunk([{"index": 0, "delta": {}, "finish_reason": answer.finish}]))
    if usage:
        events.append(chunk([], usage=_usage(answer)))
    return [*events, b"data: [DONE]"]


def _usage(answer: CachedAnswer) -> dict[str, int]:
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens}


def _id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def _whole_stream(body: bytes) -> Stream:
    """A stream that is all here: the writer sends it in one piece."""
    async def chunks() -> AsyncGenerator[bytes, None]:
        yield body

    stream = Stream(chunks())
    stream.settled = lambda: True
    stream.rest = lambda: body
    return stream
