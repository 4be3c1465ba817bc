"""Keeping a missed request's answer as it passes, in the upstream's dialect, to cache it once it
ended well: the usage tap's bytes, bounded, read into a `CachedAnswer` after the client has it."""

from __future__ import annotations

import re
from collections.abc import Callable

from llmgw.gateway.cache.entry import CachedAnswer, finish_of
from llmgw.gateway.traced import TracedTap
from llmgw.gateway.usage import Tokens
from llmgw.gateway.wire.dialect import UsageFormat
from llmgw.gateway.wire.sse import SseSplitter

# What a replay of the text alone would lose: reasoning, tool calls, a refusal. Such an answer is
# passed on as it came and never kept.
_UNREPLAYABLE = re.compile(
    rb'"reasoning_content"\s*:\s*"[^"]'
    rb'|"tool_calls"\s*:\s*\[\s*\{'
    rb'|"refusal"\s*:\s*"[^"]'
    rb'|"type"\s*:\s*"(?:tool_use|thinking|redacted_thinking|reasoning|function_call'
    rb'|response\.reasoning[a-z_.]*|response\.function_call[a-z_.]*)"')


class CapturingTap(TracedTap):
    """The usage tap of a request whose answer may be cached: it also keeps the answer's bytes,
    up to `limit` (a longer answer is not cached)."""

    def __init__(self, fmt: UsageFormat, answer_text: Callable[[bytes], str],
                 event_text: Callable[[bytes], str], limit: int) -> None:
        super().__init__(fmt, answer_text)
        self._text_of_whole = answer_text
        self._text_of_event = event_text
        self._limit = limit
        self._kept: list[bytes] = []
        self._size = 0
        self._streamed = False

    def whole(self, body: bytes) -> None:
        super().whole(body)
        self._keep(body)

    def chunk(self, data: bytes) -> None:
        super().chunk(data)
        self._streamed = True
        self._keep(data)

    def _keep(self, data: bytes) -> None:
        self._size += len(data)
        if self._size <= self._limit:
            self._kept.append(data)

    def answer(self, tokens: Tokens) -> CachedAnswer | None:
        """What to cache of the answer that passed, or None when it cannot be replayed whole:
        past the bound, no text, or more than text."""
        if self._size > self._limit or not self._kept:
            return None
        raw = b"".join(self._kept)
        if _UNREPLAYABLE.search(raw):
            return None
        finish = finish_of(raw)
        if finish is None:
            return None
        if self._streamed:
            splitter = SseSplitter()
            events = splitter.feed(raw) + splitter.rest()
            text = "".join(self._text_of_event(e) for e in events)
        else:
            text = self._text_of_whole(raw)
        if not text:
            return None
        return CachedAnswer(text, finish, tokens.prompt, tokens.completion)
