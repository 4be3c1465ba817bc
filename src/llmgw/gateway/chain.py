"""One request as a short chain of stages.

A stage is one function `(call, next) -> reply`: it does its part, hands the call on with
`next(call)` (or answers it itself: a cached answer), and settles what it opened when the call
ends, whatever the end (an error, a whole answer, a stream closed): a reservation, an answer to
keep. It registers that with `call.exchange.closers`; the service ends the call once
(`Exchange.end`). This is httpx's `send` chain, where each layer closes what it opened.

The tuple of stages a served name runs is built with each routing snapshot and holds only the
stages that apply to it (`Refresher.stage_with`): a model without a guard or a cache runs
`limits -> upstream`. A stage may return `next(call)`'s awaitable without awaiting it: one frame
less on every request's way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from llmgw.gateway.call import Reply, UpstreamCall

C = TypeVar("C")  # what a chain runs on
R = TypeVar("R")  # what it answers

# The rest of the chain, from one stage's point of view.
Next = Callable[[UpstreamCall], Awaitable[Reply]]
Stage = Callable[[UpstreamCall, Next], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class Chain:
    """What one served name runs: `run` for a call that goes upstream; `counted` for one llmgw
    answers itself (its admission only: the stages that come before the upstream's are not
    for it)."""

    names: tuple[str, ...]  # the stages, by name, for the request's trace and the tests
    run: Next
    counted: Next


def compose(stages: Sequence[Callable[[C, Callable[[C], Awaitable[R]]], Awaitable[R]]],
            last: Callable[[C], Awaitable[R]]) -> Callable[[C], Awaitable[R]]:
    """`stages` in order, then `last`, as one function of the call (a model's call, or a tool's:
    `gateway.mcp.call`)."""
    run = last
    for stage in reversed(stages):
        run = _link(stage, run)
    return run


def _link(stage: Callable[[C, Callable[[C], Awaitable[R]]], Awaitable[R]],
          nxt: Callable[[C], Awaitable[R]]) -> Callable[[C], Awaitable[R]]:
    def linked(call: C) -> Awaitable[R]:
        return stage(call, nxt)

    return linked
