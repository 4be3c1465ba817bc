"""What each judge sustained recently, read from the verdict log (pure): the capacity an operator
can plan with, as `ctl guard judge status` shows it.

The last `CAPACITY_SPAN` is cut into `CAPACITY_STEP` intervals counted back from now. An interval
counts when the judge answered in it and kept its budget: no judgment timed out, and the p99 of
its verdicts' latency (queueing included, as the gateway timed them) is within the smallest
budget of the policies they were for. The judge's sustained rate is the best such interval's
verdicts per second. Sheds do not disqualify an interval: a judge shedding is a judge at its
capacity, and its verdicts then are what it sustains.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from llmgw.core.guard import DEFAULT_BUDGET_MS, Outcome, VerdictRecord

CAPACITY_SPAN = timedelta(minutes=5)
CAPACITY_STEP = timedelta(seconds=30)
_VERDICTS = (Outcome.SAFE, Outcome.UNSAFE)


@dataclass(frozen=True)
class Capacity:
    """One judge over the last `CAPACITY_SPAN`."""

    judgments: int = 0  # every judgment logged, failures included
    shed: int = 0
    # Best verdicts per second over an interval that kept its budget; None when none did.
    sustained_per_s: float | None = None


@dataclass
class _Interval:
    verdicts: int = 0
    timed_out: int = 0
    budget_ms: int = 0
    latencies: list[float] = field(default_factory=list)


def _p99(values: list[float]) -> float:
    s = sorted(values)
    return s[max(0, math.ceil(0.99 * len(s)) - 1)]


def capacities(
    records: Iterable[VerdictRecord], budgets: Mapping[str, int], now: datetime,
    span: timedelta = CAPACITY_SPAN, step: timedelta = CAPACITY_STEP,
) -> dict[str, Capacity]:
    """Per judge: judgments and sheds in the last `span`, and the rate it sustained within
    budget (`budgets` by policy name; a policy no longer there counts with the default)."""
    judgments: dict[str, int] = {}
    shed: dict[str, int] = {}
    intervals: dict[str, dict[int, _Interval]] = {}
    step_s = step.total_seconds()
    for r in records:
        age = (now - r.at).total_seconds()
        if age < 0 or age >= span.total_seconds():
            continue
        judgments[r.judge] = judgments.get(r.judge, 0) + 1
        if r.outcome == Outcome.FAILED_SHED:
            shed[r.judge] = shed.get(r.judge, 0) + 1
        slot = intervals.setdefault(r.judge, {}).setdefault(int(age // step_s), _Interval())
        budget = budgets.get(r.policy, DEFAULT_BUDGET_MS)
        slot.budget_ms = min(slot.budget_ms, budget) if slot.budget_ms else budget
        if r.outcome == Outcome.FAILED_TIMEOUT:
            slot.timed_out += 1
        elif r.outcome in _VERDICTS:
            slot.verdicts += 1
            slot.latencies.append(r.latency_ms)
    out: dict[str, Capacity] = {}
    for judge, n in judgments.items():
        rates = [i.verdicts / step_s for i in intervals.get(judge, {}).values()
                 if i.verdicts and not i.timed_out and _p99(i.latencies) <= i.budget_ms]
        out[judge] = Capacity(judgments=n, shed=shed.get(judge, 0),
                              sustained_per_s=round(max(rates), 2) if rates else None)
    return out
