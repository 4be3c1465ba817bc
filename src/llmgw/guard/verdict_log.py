"""The verdict log's buffer: judgments are recorded in memory and written in batches."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from llmgw.core.errors import LlmgwError
from llmgw.core.guard import VerdictRecord
from llmgw.core.loops import woken

logger = logging.getLogger(__name__)

# A store outage must not grow memory without bound: beyond this, the oldest records go.
MAX_BUFFERED = 100_000


class VerdictBuffer:
    """`record` never blocks; `run` flushes every interval; `close` flushes what is left."""

    def __init__(self, write: Callable[[list[VerdictRecord]], Awaitable[None]]) -> None:
        self._write = write
        self._buf: list[VerdictRecord] = []
        self.dropped = 0
        self._wake = asyncio.Event()

    def record(self, record: VerdictRecord) -> None:
        self._buf.append(record)
        if len(self._buf) > MAX_BUFFERED:
            del self._buf[0]
            self.dropped += 1
        if len(self._buf) >= 500:
            self._wake.set()

    async def flush(self) -> None:
        batch, self._buf = self._buf, []
        if not batch:
            return
        try:
            await self._write(batch)
        except LlmgwError as exc:
            logger.warning("could not write %d verdicts (%s); keeping them for the next try",
                           len(batch), exc.message)
            self._buf = batch + self._buf
        except Exception:
            logger.exception("could not write %d verdicts; keeping them for the next try", len(batch))
            self._buf = batch + self._buf

    async def run(self, interval_s: float) -> None:
        try:
            while True:
                await woken(self._wake, interval_s)
                self._wake.clear()
                await self.flush()
        finally:
            await asyncio.shield(self.flush())
