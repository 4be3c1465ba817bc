"""Judge slots held in the install's Redis, so that N servers never send a judge replica more
judgments than it has slots.

A slot is taken there (one `SET … NX PX`, a round trip against a judgment's second or so) before
a judgment is sent to it, and given back when the judgment ends. The hold expires with the
judgment's budget plus a margin: a server that dies mid-judgment frees its slots by itself, and
the judgment could not have outlived its budget anyway (it is cancelled then).

When Redis does not answer, each server takes slots from its own book alone, as without Redis
(judgments are capacity, not money: refusing them would block every guarded request), and tries
Redis again a second later.
"""

from __future__ import annotations

import itertools
import logging
import uuid

from llmgw.core.errors import SharedStoreDown
from llmgw.store.redis_pipe import RedisPipe, Script

logger = logging.getLogger(__name__)

PREFIX = "llmgw:slot:"
# A hold outlives its judgment's budget by this much: the judgment is cancelled at its budget,
# and a give-back on its way must never find the slot taken by another server already.
HOLD_MARGIN_S = 2.0

# Gives the slot back only when this claim still holds it (not one that expired and was taken
# by another server since).
GIVE = Script("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
              "return 0")
SCRIPTS = (GIVE,)


class SharedSlots:
    """The judge slots the install's servers hold, by replica id and slot index."""

    def __init__(self, pipe: RedisPipe) -> None:
        self._pipe = pipe
        self._down = False
        self._prefix = uuid.uuid4().hex[:12] + ":"
        self._claims = itertools.count(1)

    def token(self) -> str:
        """A new claim's token: this process's random prefix and a count."""
        return f"{self._prefix}{next(self._claims)}"

    async def take(self, replica: str, index: int, token: str, hold_s: float) -> bool:
        """Hold the slot with `token` for at most `hold_s` (plus the margin); False when another
        server holds it. True without asking while Redis does not answer: taken here alone."""
        if not self._pipe.usable():
            return True
        try:
            answer = await self._pipe.call("SET", f"{PREFIX}{replica}:{index}", token, "NX", "PX",
                                           int((hold_s + HOLD_MARGIN_S) * 1000))
        except SharedStoreDown as exc:
            self._pipe.pause()
            if not self._down:
                self._down = True
                logger.warning("%s; judge slots are counted per server until it does", exc)
            return True
        if self._down:
            self._down = False
            logger.info("the shared store answers again; judge slots are shared across servers")
        return answer is not None

    def give(self, replica: str, index: int, token: str) -> None:
        """Give back a slot taken with `token` (if it still holds it)."""
        if token:
            self._pipe.send("EVALSHA", GIVE.sha, 1, f"{PREFIX}{replica}:{index}", token)
