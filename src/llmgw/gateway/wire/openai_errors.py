"""OpenAI's error body, shared by the chat completions and Responses dialects."""

from __future__ import annotations

import orjson

from llmgw.core.errors import LlmgwError


def openai_error_body(error: LlmgwError) -> bytes:
    """`{"error": {"message", "type", "param", "code"}}` for `error`."""
    return orjson.dumps(
        {"error": {"message": error.message, "type": error.type, "param": error.param, "code": error.code}}
    )
