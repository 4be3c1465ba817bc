"""The order in which one request tries a route's targets: a pure function of plain data.

Healthy targets (a ready upstream, not cooling down) come first, in the strategy's order; the
rest are left out, so a request never waits on a target known to be failing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmgw.core.routes import Strategy


@dataclass(frozen=True)
class TargetState:
    """What the strategy knows of one target at the moment of the pick."""

    name: str
    weight: int = 1
    busy: int = 0  # requests in flight to it on this server
    ready: bool = True  # it has a ready upstream (or is a remote provider)
    cooling: bool = False  # skipped until its cooldown ends


def order(targets: Sequence[TargetState], strategy: Strategy,
          random: Callable[[], float]) -> list[str]:
    """The healthy targets' names in the order one request tries them.

    `priority`: as listed. `least-busy`: fewest in flight first, ties as listed. `weighted`:
    drawn one after another in proportion to the weights (`random()` in [0, 1)), so the first
    pick lands on each target in proportion to its weight and the fallbacks follow likewise;
    a target of weight 0 only ever serves as a fallback, after the weighted ones."""
    healthy = [t for t in targets if t.ready and not t.cooling]
    if strategy == Strategy.PRIORITY:
        return [t.name for t in healthy]
    if strategy == Strategy.LEAST_BUSY:
        return [t.name for t in sorted(healthy, key=lambda t: t.busy)]  # sorted() is stable
    out: list[str] = []
    pool = [t for t in healthy if t.weight > 0]
    while pool:
        total = sum(t.weight for t in pool)
        point = random() * total
        for i, t in enumerate(pool):
            point -= t.weight
            if point < 0 or i == len(pool) - 1:
                out.append(t.name)
                del pool[i]
                break
    return out + [t.name for t in healthy if t.weight == 0]
