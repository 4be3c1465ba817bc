"""The order in which one request tries a route's targets: pure functions of plain data.

Two steps, as a scheduler's policies: `sift` keeps the healthy targets (in the catalog, with a
ready upstream, not cooling down) and says why it left each other one out; `rank` orders what
is kept by the route's strategy. A request never waits on a target known to be failing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from llmgw.core.routes import Strategy


class LeftOut(StrEnum):
    """Why a target is not among those one request tries."""

    MISSING = "not in the catalog"
    NOT_READY = "no ready replica"
    COOLING = "cooling down after failures"


@dataclass(frozen=True)
class TargetState:
    """What the strategy knows of one target at the moment of the pick."""

    name: str
    weight: int = 1
    busy: int = 0  # requests in flight to it on this server
    ready: bool = True  # it has a ready upstream (or is a remote provider)
    cooling: bool = False  # skipped until its cooldown ends
    known: bool = True  # it is in the catalog


@dataclass(frozen=True)
class Sifted:
    """The targets a request may try, and the reason for each one it may not."""

    kept: list[TargetState]
    left_out: dict[str, LeftOut] = field(default_factory=dict)


def sift(targets: Sequence[TargetState]) -> Sifted:
    """Keep the healthy targets, in their listed order; name the reason for every other."""
    kept: list[TargetState] = []
    left_out: dict[str, LeftOut] = {}
    for t in targets:
        if not t.known:
            left_out[t.name] = LeftOut.MISSING
        elif t.cooling:  # before readiness: a cooling target is skipped even when it is ready
            left_out[t.name] = LeftOut.COOLING
        elif not t.ready:
            left_out[t.name] = LeftOut.NOT_READY
        else:
            kept.append(t)
    return Sifted(kept, left_out)


def rank(healthy: Sequence[TargetState], strategy: Strategy,
         random: Callable[[], float]) -> list[str]:
    """The healthy targets' names in the order one request tries them.

    `priority`: as listed. `least-busy`: fewest in flight first, ties as listed. `weighted`:
    drawn one after another in proportion to the weights (`random()` in [0, 1)), so the first
    pick lands on each target in proportion to its weight and the fallbacks follow likewise;
    a target of weight 0 only ever serves as a fallback, after the weighted ones."""
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


def order(targets: Sequence[TargetState], strategy: Strategy,
          random: Callable[[], float]) -> list[str]:
    """`rank` over what `sift` keeps: the names one request tries, best first."""
    return rank(sift(targets).kept, strategy, random)
