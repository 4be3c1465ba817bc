"""The usage meter: per key, model and day, counted in memory and written in batches."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel

from llmgw.core.errors import LlmgwError, StoreRefused
from llmgw.core.types import UsageRow
from llmgw.gateway.wire import openai_chat
from llmgw.gateway.wire.dialect import UsageFormat
from llmgw.store.store import Store

logger = logging.getLogger(__name__)

R = TypeVar("R", bound=BaseModel)

# The most one request may count of each kind: ten times the largest context window offered
# today, so no honest answer is cut, and far from what the store's 64-bit counters can add up.
# A larger number from an upstream is counted as this many (it still hits the key's budget).
MAX_COUNT = 100_000_000
# Longer than any dialect's text marker.
_CARRY = 40


def _pattern(key: bytes) -> re.Pattern[bytes]:
    # The value as written, whatever it is: only a plain non-negative integer is believed.
    return re.compile(re.escape(key) + rb"\s*:\s*([^,}\s]*)")


@functools.cache
def _patterns(fmt: UsageFormat) -> tuple[re.Pattern[bytes], re.Pattern[bytes], tuple[re.Pattern[bytes], ...]]:
    """The prompt, completion and extra prompt counts of a dialect's usage."""
    return _pattern(fmt.prompt), _pattern(fmt.completion), tuple(_pattern(k) for k in fmt.prompt_also)


def _text_events(data: bytes, markers: tuple[tuple[bytes, bytes], ...]) -> int:
    """Events carrying text: each marker counts, except where it opens an empty string."""
    n = 0
    for marker, empty in markers:  # a loop, not sum() over a generator: this runs per chunk
        n += data.count(marker) - data.count(empty)
    return n


@functools.cache
def _markers(fmt: UsageFormat) -> tuple[tuple[bytes, bytes], ...]:
    """Each text marker with its empty-string form, made once per dialect."""
    return tuple((m, m + b'"') for m in fmt.text_markers)


@dataclass
class Tokens:
    """What one request used, as the upstream reported it (or as counted from its stream)."""

    prompt: int = 0
    completion: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


class UsageTap:
    """Reads token usage from an upstream answer, in the upstream's dialect (`fmt`), without
    decoding the rest of it.

    Whole answers carry `usage`; streams may carry it in their last event (Anthropic's put the
    prompt count in their first). A stream without it counts one completion token per event that
    carries text (llama.cpp sends one per token) and the caller's estimate of the prompt
    (llama-server puts usage in a chat stream only when the client asks for it with
    `stream_options.include_usage`).

    Upstream numbers are not trusted: a count above MAX_COUNT is counted as MAX_COUNT, and a
    count that is not a non-negative integer (negative, fractional, a string) is replaced by the
    estimate, as is the whole `usage` of an answer that has none (a whole answer's completion is
    then about one token per 4 bytes of its text).
    """

    def __init__(self, fmt: UsageFormat = openai_chat.USAGE,
                 answer_text: Callable[[bytes], str] = openai_chat.answer_text) -> None:
        self._fmt = fmt
        self._markers = _markers(fmt)
        self._answer_text = answer_text
        self._first: bytes | None = None  # a stream's first chunk, when its prompt count is there
        # The last chunks, by reference (no copies on the hot path): usage sits in the last event.
        self._last: deque[bytes] = deque(maxlen=4)
        # The end of the previous chunk, so a text marker cut by the network is still seen once.
        self._carry = b""
        self.events_with_text = 0
        self._whole: bytes | None = None  # a whole answer, read when its usage is settled
        self._whole_read: tuple[_Reported, int] | None = None  # what it said, once read
        self.first_chunk_at: float | None = None  # monotonic time of a stream's first chunk

    def whole(self, body: bytes) -> None:
        # Kept by reference and read in `result`: the request is settled after its answer is
        # written, so reading the usage is off the client's wait.
        self._whole = body

    def chunk(self, data: bytes) -> None:
        if self.first_chunk_at is None:
            self.first_chunk_at = time.monotonic()
            if self._fmt.prompt_first:
                self._first = data
        # bytes.count is a C scan: a regex over every streamed byte cost a tenth of the relay.
        markers = self._markers
        n = _text_events(data, markers)
        if self._carry:  # a marker cut by the network: count what the join adds, once
            head = data[:_CARRY]
            n += (_text_events(self._carry + head, markers) - _text_events(self._carry, markers)
                  - _text_events(head, markers))
        self.events_with_text += n
        self._carry = data[-_CARRY:]
        self._last.append(data)

    def _text_tokens(self, body: bytes) -> int:
        """About one token per 4 bytes of the text (and tool calls) a whole answer generated."""
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError:
            return min(math.ceil(len(body) / 4), MAX_COUNT)
        return min(math.ceil(len(self._answer_text(body).encode()) / 4), MAX_COUNT)

    def result(self, prompt_estimate: int = 0) -> Tokens:
        """The usage seen; what the upstream did not say (or said wrong) is estimated, with
        `prompt_estimate` prompt tokens."""
        if self._whole is not None:
            if self._whole_read is None:
                body = self._whole
                said = _usage(body, self._fmt) or _Reported(None, None)
                self._whole_read = (said, self._text_tokens(body) if said.completion is None else 0)
            reported, completion = self._whole_read
        else:
            found = _usage(b"".join(self._last), self._fmt)
            if self._first is not None and (found is None or found.prompt in (None, 0)):
                first = _usage(self._first, self._fmt, first=True)
                if first is not None and first.prompt:
                    found = _Reported(first.prompt, found.completion if found else None)
            completion = self.events_with_text
            if found is None:
                return Tokens(prompt_estimate if self.events_with_text else 0, completion)
            reported = found
        return Tokens(prompt_estimate if reported.prompt is None else reported.prompt,
                      completion if reported.completion is None else reported.completion)


@dataclass(frozen=True)
class _Reported:
    """An upstream's usage counts, each clamped, or None where it is not a count to believe."""

    prompt: int | None
    completion: int | None


def _usage(data: bytes, fmt: UsageFormat, first: bool = False) -> _Reported | None:
    """The last (or `first`) `usage` object's token counts; only its neighbourhood is searched
    (a regex over a whole answer would cost more than relaying it)."""
    at = data.find(b'"usage"') if first else data.rfind(b'"usage"')
    if at < 0:
        return None
    part = data[at : at + 512]
    prompt_re, completion_re, also = _patterns(fmt)
    prompt = prompt_re.search(part)
    completion = completion_re.search(part)
    if prompt is None and completion is None:
        return None
    counted = _count(prompt)
    for pattern in also:
        extra = pattern.search(part)
        if counted is not None and extra is not None:
            more = _count(extra)
            counted = None if more is None else min(counted + more, MAX_COUNT)
    return _Reported(counted, _count(completion))


def _count(found: re.Match[bytes] | None) -> int | None:
    if found is None:
        return 0  # not in the usage object: none of that kind (embeddings have no completion)
    raw = found.group(1)
    if not raw.isdigit():
        return None
    return min(int(raw), MAX_COUNT)


class RowBuffer(Generic[R]):
    """Counts per row (a usage table's key columns), kept in memory and written in batches of
    additive rows by `write`: what a usage meter is made of. `counts` never blocks; `flush`
    writes the deltas and keeps what could not be written; a row the database refuses is dropped
    alone, never holding back the others."""

    def __init__(self, model: type[R], names: tuple[str, ...], write: Callable[[list[R]], None],
                 what: str) -> None:
        self._model = model
        self._names = names  # the key columns, the key id first
        self._counters = tuple(f for f in model.model_fields if f not in names)
        self._write = write
        self._what = what  # how the log names a row
        self._buf: defaultdict[tuple[str, ...], dict[str, Any]] = defaultdict(self._zero)
        self._lock = asyncio.Lock()

    def _zero(self) -> dict[str, Any]:
        return dict.fromkeys(self._counters, 0)

    def counts(self, key: tuple[str, ...]) -> dict[str, Any]:
        """The counts of the row at `key` (its key columns' values), to add to."""
        return self._buf[key]

    async def flush(self) -> None:
        async with self._lock:
            batch, self._buf = self._buf, defaultdict(self._zero)
            if not batch:
                return
            rows = [self._model(**dict(zip(self._names, k, strict=True)), **c)
                    for k, c in batch.items()]
            try:
                await asyncio.to_thread(self._write, rows)
            except StoreRefused:
                await self._one_by_one(rows)
            except Exception as exc:
                # The caller logs an outage; anything else is a fault worth its traceback here.
                # (Cancelled, the write may still finish in its thread: nothing is kept twice.)
                if not isinstance(exc, LlmgwError):
                    logger.exception("could not write %s; keeping it for the next try", self._what)
                self._keep(rows)
                raise

    async def _one_by_one(self, rows: list[R]) -> None:
        """Write each row on its own, so a row the database refuses cannot hold back the others
        (nor, retried with them forever, every later flush and the limit sync)."""
        for i, row in enumerate(rows):
            try:
                await asyncio.to_thread(self._write, [row])
            except StoreRefused as exc:
                key = [getattr(row, n) for n in self._names]
                said = ", ".join(f"{n} {v}" for n, v in zip(self._names[1:], key[1:], strict=True))
                logger.error("%s row refused by the database, dropped: key %s, %s, %s: %s",
                             self._what, key[0], said, {c: getattr(row, c) for c in self._counters},
                             exc.message)
            except Exception:
                self._keep(rows[i:])
                raise

    def _keep(self, rows: list[R]) -> None:
        """Put unwritten rows back for the next flush."""
        for r in rows:
            counts = self._buf[tuple(getattr(r, n) for n in self._names)]
            for name in self._counters:
                counts[name] += getattr(r, name)


class UsageMeter:
    """Model usage per key, model and day: `record` never blocks; `flush` writes the deltas;
    nothing is lost on a clean shutdown."""

    def __init__(self, store: Store, now: Callable[[], datetime]) -> None:
        self._now = now
        self._rows = RowBuffer(UsageRow, ("key_id", "model", "day"),
                               lambda rows: store.usage.add_usage(rows), "usage")
        self._day: date | None = None
        self._day_text = ""

    def record(self, key_id: str, model: str, tokens: Tokens, *, error: bool, blocked: bool,
               saved: int | None = None) -> None:
        """Count one request; `saved`: it was answered from the cache, sparing that many
        tokens."""
        day = self._now().date()
        if day != self._day:
            self._day, self._day_text = day, day.isoformat()
        row = self._rows.counts((key_id, model, self._day_text))
        row["requests"] += 1
        row["prompt_tokens"] += tokens.prompt
        row["completion_tokens"] += tokens.completion
        row["errors"] += int(error)
        row["blocked"] += int(blocked)
        if saved is not None:
            row["cache_hits"] += 1
            row["saved_tokens"] += saved

    async def flush(self) -> None:
        await self._rows.flush()
