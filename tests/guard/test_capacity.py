"""What a judge sustained within budget, read from verdict records (plain data, fixed times)."""

from __future__ import annotations

from datetime import timedelta

from llmgw.core.guard import Direction, Outcome, VerdictRecord
from llmgw.guard.capacity import Capacity, capacities
from tests.factories import NOW

JUDGE = "demo-judge"
BUDGETS = {"default": 5000, "tight": 500}


def verdicts(n: int, *, seconds_ago: float, latency_ms: float = 400.0,
             outcome: Outcome = Outcome.SAFE, policy: str = "default",
             judge: str = JUDGE) -> list[VerdictRecord]:
    """`n` judgments logged over the second that ended `seconds_ago`."""
    return [VerdictRecord(at=NOW - timedelta(seconds=seconds_ago + i / n), policy=policy,
                          judge=judge, direction=Direction.INPUT, outcome=outcome,
                          latency_ms=latency_ms) for i in range(n)]


def test_the_best_interval_within_budget_is_the_sustained_rate() -> None:
    records = [*verdicts(30, seconds_ago=10), *verdicts(60, seconds_ago=40)]
    [(judge, cap)] = capacities(records, BUDGETS, NOW).items()
    assert judge == JUDGE
    assert cap == Capacity(judgments=90, shed=0, sustained_per_s=2.0)  # 60 in 30 s


def test_an_interval_whose_p99_overran_the_budget_does_not_count() -> None:
    records = [*verdicts(15, seconds_ago=10), *verdicts(99, seconds_ago=40),
               *verdicts(2, seconds_ago=40, latency_ms=5200)]
    assert capacities(records, BUDGETS, NOW)[JUDGE].sustained_per_s == 0.5


def test_the_tightest_policy_budget_of_an_interval_applies() -> None:
    records = [*verdicts(30, seconds_ago=10, latency_ms=600), *verdicts(1, seconds_ago=10,
                                                                         policy="tight")]
    assert capacities(records, BUDGETS, NOW)[JUDGE].sustained_per_s is None


def test_a_timeout_disqualifies_but_sheds_do_not_and_are_counted() -> None:
    records = [*verdicts(30, seconds_ago=10), *verdicts(1, seconds_ago=10,
                                                        outcome=Outcome.FAILED_TIMEOUT),
               *verdicts(15, seconds_ago=40), *verdicts(40, seconds_ago=40,
                                                        outcome=Outcome.FAILED_SHED)]
    cap = capacities(records, BUDGETS, NOW)[JUDGE]
    assert cap.sustained_per_s == 0.5 and cap.shed == 40 and cap.judgments == 86


def test_only_the_last_five_minutes_count_per_judge() -> None:
    records = [*verdicts(90, seconds_ago=400), *verdicts(3, seconds_ago=10, judge="other")]
    assert capacities(records, BUDGETS, NOW) == {
        "other": Capacity(judgments=3, shed=0, sustained_per_s=0.1)}
