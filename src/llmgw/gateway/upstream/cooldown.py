"""Per-target cooldowns: a target that failed N times within a window is skipped for a while.

The rule is a pure function of a target's recent failures and the time (`after_failure`); the
`Cooldowns` holder keeps each (route, target)'s state for this process, in memory. Without a
shared Redis each process judges its targets by the failures it saw itself: a cooldown is not
shared through the store (it would put a database write on the failing request's path and a
read on every request's). With one, cooldowns started anywhere arrive here too (`cool`, from
`gateway.upstream.shared_cooldowns`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmgw.core.routes import Cooldown


@dataclass(frozen=True)
class TargetHealth:
    """One target's recent failures (monotonic times, oldest first) and when its cooldown ends."""

    failures: tuple[float, ...] = ()
    until: float = 0.0

    def cooling(self, now: float) -> bool:
        return self.until > now


def after_failure(health: TargetHealth, rule: Cooldown, now: float) -> TargetHealth:
    """The state after one more failure at `now`: failures older than the window are forgotten;
    the N-th within it starts a cooldown (and clears the count, so the target gets N fresh tries
    once it is back). A failure while it cools down (a request sent before) changes nothing."""
    if health.cooling(now):
        return health
    recent = tuple(t for t in health.failures if now - t < rule.window_s) + (now,)
    if len(recent) >= rule.failures:
        return TargetHealth((), now + rule.cooldown_s)
    return TargetHealth(recent, health.until)


def after_success(health: TargetHealth) -> TargetHealth:
    """A target that answered starts counting afresh."""
    return TargetHealth((), health.until) if health.failures else health


@dataclass
class Cooldowns:
    """This server's health of every route target, by (route, target)."""

    _health: dict[tuple[str, str], TargetHealth] = field(default_factory=dict)
    # How many targets of each route have state: none is the common case, and then a request
    # need not look at any.
    _held: dict[str, int] = field(default_factory=dict)

    def quiet(self, route: str) -> bool:
        """Whether no target of `route` has failed recently or is cooling down."""
        return route not in self._held

    def get(self, route: str, target: str) -> TargetHealth:
        return self._health.get((route, target)) or TargetHealth()

    def cooling(self, route: str, target: str, now: float) -> bool:
        health = self._health.get((route, target))
        return health is not None and health.until > now

    def failed(self, route: str, target: str, rule: Cooldown, now: float) -> bool:
        """Count a failure; True when it started a cooldown."""
        before = self._health.get((route, target))
        if before is None:
            before = TargetHealth()
            self._held[route] = self._held.get(route, 0) + 1
        after = after_failure(before, rule, now)
        self._health[(route, target)] = after
        return after.until != before.until

    def cool(self, route: str, target: str, until: float) -> bool:
        """A cooldown another process started, until `until` on this process's clock; True when
        it changed anything (a later end than this process knew)."""
        before = self._health.get((route, target))
        if before is not None and before.until >= until:
            return False
        if before is None:
            self._held[route] = self._held.get(route, 0) + 1
        self._health[(route, target)] = TargetHealth((), until)
        return True

    def succeeded(self, route: str, target: str, now: float) -> None:
        """A target answered: its count starts afresh (and its state goes once nothing is left)."""
        health = self._health.get((route, target))
        if health is None:
            return
        health = after_success(health)
        if health.until > now:
            self._health[(route, target)] = health
            return
        del self._health[(route, target)]
        self._held[route] -= 1
        if not self._held[route]:
            del self._held[route]

    def forget_route(self, route: str) -> None:
        """Drop the state of a route that is gone."""
        for pair in [p for p in self._health if p[0] == route]:
            del self._health[pair]
        self._held.pop(route, None)
