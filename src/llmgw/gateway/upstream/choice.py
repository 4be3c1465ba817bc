"""Choosing the replica one attempt goes to: the one place a model's upstreams are ranked.

A pure function of the candidates (a model's ready upstreams, each carrying its load: requests
in flight, and until when a refused connection keeps it last in line), what the attempt must
avoid (the upstreams it already tried) and the tie-breaker `turn`; time is passed in. The way
out (`reach.connect`) calls it and sends to what it chose; the transport never chooses. For a
model llmgw serves on its own engines, a request's affinity (its conversation's head or its
session, `prefix.affinity`) ranks the replicas instead (`prefix.near`), weighed against load;
a remote provider's upstreams stay least outstanding.
"""

from __future__ import annotations

import itertools
import time

from llmgw.core.errors import NoReadyReplica
from llmgw.gateway.upstream.prefix import Affinity, near
from llmgw.gateway.upstream.table import Serving, Upstream

# Rotates ties between equally busy upstreams, across every request of the process.
_turns = itertools.count(1)


def pick(
    upstreams: tuple[Upstream, ...], exclude: frozenset[str], turn: int, now: float = 0.0
) -> Upstream | None:
    """The upstream with the fewest requests in flight, one recently refused only when no other
    is left; ties rotate with `turn`."""
    best: Upstream | None = None
    best_down = True
    n = len(upstreams)
    for i in range(n):
        up = upstreams[(turn + i) % n]
        if up.id in exclude:
            continue
        down = up.down_until > now
        if best is None or (best_down and not down) or (
            down == best_down and up.outstanding < best.outstanding
        ):
            best, best_down = up, down
    return best


def choose(route: Serving, exclude: frozenset[str] = frozenset(),
           found: Affinity | None = None) -> tuple[Upstream, str]:
    """The upstream to send to now and why ("" for least outstanding): by `found`'s ranking
    (`prefix.near`) when the request has an affinity and the model runs on llmgw's engines on
    more than one replica, else `pick`'s on the next turn. NoReadyReplica with the reason when
    there is none."""
    now = time.monotonic()
    if found is not None and len(route.upstreams) > 1 and not route.model.is_remote:
        chosen = near(route.upstreams, exclude, found, now)
        if chosen is not None:
            return chosen
    up = pick(route.upstreams, exclude, next(_turns), now)
    if up is None:
        if exclude:
            raise NoReadyReplica(f"model '{route.model.name}': no other ready replica to retry on")
        raise NoReadyReplica(f"model '{route.model.name}' has no ready replica: {route.unavailable}")
    return up, ""
