"""What the cache keeps of an answer: its text, why it ended and the tokens it took. Kept in one
neutral shape, so any dialect, streamed or not, can be replayed from it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

# How each dialect says an answer ended, as chat completions say it. An answer that ended any
# other way (tool calls, a content filter) is not kept: its text alone is not the answer.
_FINISHES = {b"stop": "stop", b"end_turn": "stop", b"stop_sequence": "stop", b"completed": "stop",
             b"length": "length", b"max_tokens": "length", b"incomplete": "length"}
# Where an answer says so: chat's `finish_reason`, Anthropic's `stop_reason`, a Response's
# `status` (its last, after the output items' own).
_FINISH = re.compile(rb'"(?:finish_reason|stop_reason|status)"\s*:\s*"([A-Za-z_]{1,32})"')
# A Response that called a function ends "completed" all the same.
_CALLED = re.compile(rb'"type"\s*:\s*"function_call"')


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """One kept answer."""

    text: str
    finish: str  # "stop" or "length", as chat completions say it
    prompt_tokens: int
    completion_tokens: int

    def encode(self) -> bytes:
        return orjson.dumps([self.text, self.finish, self.prompt_tokens, self.completion_tokens])

    @staticmethod
    def decode(raw: bytes) -> CachedAnswer | None:
        """The answer `encode` wrote, or None for bytes that are not one (another version's)."""
        try:
            text, finish, prompt, completion = orjson.loads(raw)
        except (orjson.JSONDecodeError, TypeError, ValueError):
            return None
        if not (isinstance(text, str) and finish in ("stop", "length")
                and isinstance(prompt, int) and isinstance(completion, int)):
            return None
        return CachedAnswer(text, finish, prompt, completion)


def finish_of(raw: bytes) -> str | None:
    """How an answer (a whole body, or a stream's events joined) ended, as chat says it; None
    when it ended some way a replay of its text could not say (tool calls, a filter), or never
    said."""
    if _CALLED.search(raw):
        return None
    found = _FINISH.findall(raw)
    ends = [_FINISHES.get(f) for f in found if f not in (b"in_progress", b"null")]
    return ends[-1] if ends else None
