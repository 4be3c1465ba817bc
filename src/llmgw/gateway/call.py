"""The data plane's seam: one value for a call to an upstream, and one framework-free reply.

`api/` reads an HTTP request into an `UpstreamCall` and writes a `Reply` back with its framework;
everything between (guard, limits, usage, translation, the transport) works on these values.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from llmgw.core.cache import NONE_SAID, Directives
from llmgw.core.types import ApiKey
from llmgw.gateway.upstream.prefix import Affinity
from llmgw.gateway.upstream.router import Plan
from llmgw.gateway.upstream.table import Serving
from llmgw.gateway.usage import Tokens, UsageTap
from llmgw.gateway.wire.dialect import Api, Ask, Wire
from llmgw.gateway.wire.translate import Translation

logger = logging.getLogger(__name__)

# What a stage that opened something runs when the call ends: its status and what it used.
Closer = Callable[[int, Tokens], None]
# What the way out (`reach`) runs just before it chooses a replica for a call, once the stages
# and the input judgment are behind it: None to go at once, or what to await first (the call's
# turn on a busy model's slots, `stages.fair`).
Gate = Callable[["UpstreamCall"], Awaitable[None] | None]


# Not frozen: made on every request, and a frozen dataclass sets each field through
# `object.__setattr__` (five times the cost). Nothing changes one once made.
@dataclass(slots=True)
class Outbound:
    """What goes to the upstream for a call: where, which bytes, and how its answer comes back."""

    path: str
    body: bytes
    translation: Translation | None
    wire: Wire  # the upstream's dialect


# Not frozen: made on every request, and a frozen dataclass sets each field through
# `object.__setattr__` (five times the cost). Nothing changes one once made.
@dataclass(slots=True)
class UpstreamCall:
    """One client request on its way to an upstream of `route`."""

    route: Serving
    body: bytes  # the client's body as it came
    payload: dict[str, Any]  # the same, parsed
    api: Api  # what the client called
    wire: Wire  # the client's dialect
    ask: Ask  # what guard, limits and usage need of it
    request_id: str
    key: ApiKey
    started: float  # monotonic time the request arrived
    # Set when the client named a route: the targets to try, in order (`route` is the first).
    plan: Plan | None = None
    # The upstream request as built for `route` (None: no upstream is asked; llmgw answers).
    out: Outbound | None = None
    said: Directives = NONE_SAID  # what the client said of the response cache
    # What happens to it, shared by every stage (and every copy made for another target).
    exchange: Exchange = field(default_factory=lambda: Exchange(UsageTap()))
    # What keeps it with its conversation on a model's replicas (None: least outstanding).
    affinity: Affinity | None = None
    # What it waits on in the way out before a replica is chosen (None: nothing).
    gate: Gate | None = None


@dataclass
class Exchange:
    """What happened to one call, filled in while it runs: read when it is accounted."""

    tap: UsageTap
    blocked: bool = False  # the guard stopped the answer mid-stream
    # The output guard's word on the answer: None while no output judgment ran, True while
    # every one had each judge's verdict, False once one let it through without (fail-open).
    judged: bool | None = None
    broke: bool = False  # the upstream's stream broke (the client got the dialect's error event)
    # On a route: the catalog model that answered, which usage and metrics are counted against.
    target: str = ""
    # Turned away at admission (a limit): not counted as a request at all.
    refused: bool = False
    # What the call is charged when no upstream answered it (a cached answer), instead of what
    # the tap counted; and the tokens a cached answer saved (None: none was served).
    charged: Tokens | None = None
    saved: int | None = None
    # What the stages opened, each settled when the call ends (`end`), the last opened first.
    closers: list[Closer] = field(default_factory=list)

    def verdict(self, judged: bool) -> None:
        """Note an output judgment: `judged` when every judge gave a verdict. One pass let
        through unjudged leaves the whole answer unjudged."""
        self.judged = judged and self.judged is not False

    def end(self, status: int, tokens: Tokens) -> None:
        """Settle what the stages opened, as the call ended: once, the last opened first. A
        closer's failure must not keep the next from settling what it holds."""
        closers, self.closers = self.closers, []
        for closer in reversed(closers):
            try:
                closer(status, tokens)
            except Exception:
                logger.exception("settling a call failed")


class Stream:
    """A streamed answer: SSE chunks to send as they come, and what must run when it ends.

    Whoever writes it to the client calls `close` exactly once, whether the stream ran to its
    end, the client left, or it was never started: that releases the upstream and settles usage.
    """

    def __init__(self, chunks: AsyncGenerator[bytes, None]) -> None:
        self._chunks = chunks
        self._taken = False  # whether anyone took `chunks`: if not, there is nothing to close
        # True once the rest of `chunks` comes without waiting on anything (the upstream's whole
        # answer has arrived): the writer may then send what is left at once. None: never known.
        self.settled: Callable[[], bool] | None = None
        # Whether the upstream broke the stream (it then ended with the dialect's error event):
        # read when it is closed, so a stream sent to its end still counts as failed.
        self.broke: Callable[[], bool] = _never
        # The rest of `chunks` as one block without iterating them, once the upstream's whole
        # answer is here (None before then, or when it cannot be had so): set where nothing
        # stands between the upstream and the client. Taken with `take_rest`.
        self.rest: Callable[[], bytes | None] | None = None
        # What must see that block, once written and before the closers run (the usage tap:
        # its scan over the whole answer is then off the client's wait).
        self.on_rest: Callable[[bytes], None] | None = None
        self._rest: bytes | None = None
        self._closers: list[Callable[[bool], None]] = []
        self._closed = False

    @property
    def chunks(self) -> AsyncGenerator[bytes, None]:
        """The chunks, to iterate once."""
        self._taken = True
        return self._chunks

    def on_close(self, closer: Callable[[bool], None]) -> None:
        """Run `closer(completed)` when the stream is closed (last added runs first)."""
        self._closers.append(closer)

    async def close(self, completed: bool) -> None:
        """End the stream: `completed` when every chunk was sent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._taken:  # (closing a generator never started costs a turn of its hooks)
                await self._chunks.aclose()
        finally:
            self._run_closers(completed)

    @property
    def taken(self) -> bool:
        """Whether anyone took `chunks`."""
        return self._taken

    def take_rest(self) -> bytes | None:
        """The rest of the chunks as one block (see `rest`), or None when it cannot be had."""
        assert self.rest is not None and not self._taken
        self._rest = self.rest()
        return self._rest

    def close_untaken(self, completed: bool) -> None:
        """`close` without waiting, for a stream whose chunks nobody took (its rest was
        written instead, or nothing was)."""
        assert not self._taken, "a stream whose chunks were taken is closed with `close`"
        if not self._closed:
            self._closed = True
            rest, seen = self._rest, self.on_rest
            if rest and seen is not None:  # first of the closers: usage is settled after it
                self._closers.append(lambda _completed: seen(rest))
            self._run_closers(completed)

    def _run_closers(self, completed: bool) -> None:
        for closer in reversed(self._closers):
            # A closer's failure must not keep the next from releasing what it holds.
            try:
                closer(completed)
            except Exception:
                logger.exception("closing a stream failed")


def _never() -> bool:
    return False


@dataclass
class Reply:
    """An upstream's answer as llmgw passes it on: a whole body, or a stream of SSE chunks."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    stream: Stream | None = None
    # Headers of llmgw's own for the client (a refusal's `Retry-After`, `X-Llmgw-Cache`).
    headers: dict[str, str] | None = None
