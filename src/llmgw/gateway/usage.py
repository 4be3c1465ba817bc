"""The usage meter: per key, model and day, counted in memory and written in batches."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime

from llmgw.core.errors import LlmgwError
from llmgw.store.store import Store
from llmgw.store.usage_repo import COUNTERS, UsageRow

logger = logging.getLogger(__name__)

_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
# Longer than the markers below.
_CARRY = 16


def _text_events(data: bytes) -> int:
    """Events carrying text, as llama.cpp and OpenAI write them (no spaces around the colon)."""
    return (data.count(b'"content":"') - data.count(b'"content":""')
            + data.count(b'"text":"') - data.count(b'"text":""'))


@dataclass
class Tokens:
    """What one request used, as the upstream reported it (or as counted from its stream)."""

    prompt: int = 0
    completion: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


class UsageTap:
    """Reads token usage from an upstream answer without decoding the rest of it.

    Whole answers carry `usage`; streams may carry it in their last event. A stream without it
    counts one completion token per event that carries text (llama.cpp sends one per token) and
    the caller's estimate of the prompt (llama-server puts usage in a stream only when the
    client asks for it with `stream_options.include_usage`).
    """

    def __init__(self) -> None:
        # The last chunks, by reference (no copies on the hot path): usage sits in the last event.
        self._last: deque[bytes] = deque(maxlen=4)
        # The end of the previous chunk, so a text marker cut by the network is still seen once.
        self._carry = b""
        self.events_with_text = 0
        self.tokens: Tokens | None = None
        self.first_chunk_at: float | None = None  # monotonic time of a stream's first chunk

    def whole(self, body: bytes) -> None:
        self.tokens = _usage(body)

    def chunk(self, data: bytes) -> None:
        if self.first_chunk_at is None:
            self.first_chunk_at = time.monotonic()
        # bytes.count is a C scan: a regex over every streamed byte cost a tenth of the relay.
        n = _text_events(data)
        if self._carry:  # a marker cut by the network: count what the join adds, once
            head = data[:_CARRY]
            n += _text_events(self._carry + head) - _text_events(self._carry) - _text_events(head)
        self.events_with_text += n
        self._carry = data[-_CARRY:]
        self._last.append(data)

    def result(self, prompt_estimate: int = 0) -> Tokens:
        """The usage seen; a stream without a usage event gets `prompt_estimate` prompt tokens."""
        if self.tokens is not None:
            return self.tokens
        found = _usage(b"".join(self._last))
        if found is not None:
            return found
        return Tokens(prompt_estimate if self.events_with_text else 0, self.events_with_text)


def _usage(data: bytes) -> Tokens | None:
    """The last `usage` object's token counts; only its neighbourhood is searched (a regex over
    a whole answer would cost more than relaying it)."""
    at = data.rfind(b'"usage"')
    if at < 0:
        return None
    part = data[at : at + 512]
    prompt = _PROMPT.search(part)
    completion = _COMPLETION.search(part)
    if prompt is None and completion is None:
        return None
    return Tokens(int(prompt.group(1)) if prompt else 0, int(completion.group(1)) if completion else 0)


class UsageMeter:
    """`record` never blocks; `flush` writes the deltas; nothing is lost on a clean shutdown."""

    def __init__(self, store: Store, now: Callable[[], datetime]) -> None:
        self._store = store
        self._now = now
        self._buf: dict[tuple[str, str, str], dict[str, int]] = defaultdict(
            lambda: dict.fromkeys(COUNTERS, 0)
        )
        self._lock = asyncio.Lock()
        self._day: date | None = None
        self._day_text = ""

    def record(self, key_id: str, model: str, tokens: Tokens, *, error: bool, blocked: bool) -> None:
        day = self._now().date()
        if day != self._day:
            self._day, self._day_text = day, day.isoformat()
        row = self._buf[(key_id, model, self._day_text)]
        row["requests"] += 1
        row["prompt_tokens"] += tokens.prompt
        row["completion_tokens"] += tokens.completion
        row["errors"] += int(error)
        row["blocked"] += int(blocked)

    async def flush(self) -> None:
        async with self._lock:
            batch, self._buf = self._buf, defaultdict(lambda: dict.fromkeys(COUNTERS, 0))
            if not batch:
                return
            rows = [UsageRow(k, m, d, **c) for (k, m, d), c in batch.items()]
            try:
                await asyncio.to_thread(self._store.usage.add_usage, rows)
            except Exception as exc:
                # The caller logs an outage; anything else is a fault worth its traceback here.
                if not isinstance(exc, LlmgwError):
                    logger.exception("could not write usage; keeping it for the next try")
                for (k, m, d), c in batch.items():
                    for name, v in c.items():
                        self._buf[(k, m, d)][name] += v
                raise
