"""The order a request tries a route's targets in, from plain data."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from llmgw.core.routes import Strategy
from llmgw.gateway.upstream.strategies import LeftOut, TargetState, order, sift


def first_picks(targets: list[TargetState], n: int, seed: int = 7) -> Counter[str]:
    draw = random.Random(seed).random
    return Counter(order(targets, Strategy.WEIGHTED, draw)[0] for _ in range(n))


def test_priority_tries_targets_as_listed_skipping_cooling_and_unready_ones() -> None:
    targets = [TargetState("a", cooling=True), TargetState("b", ready=False), TargetState("c"),
               TargetState("d")]
    assert order(targets, Strategy.PRIORITY, random.random) == ["c", "d"]


def test_least_busy_tries_the_least_loaded_first_and_breaks_ties_in_listed_order() -> None:
    targets = [TargetState("a", busy=3), TargetState("b", busy=1), TargetState("c", busy=1),
               TargetState("d", busy=0, cooling=True)]
    assert order(targets, Strategy.LEAST_BUSY, random.random) == ["b", "c", "a"]


@pytest.mark.parametrize("weights", [(3, 1), (1, 1, 2), (70, 20, 10)])
def test_weighted_first_picks_over_1000_requests_land_within_5_points_of_the_weights(
    weights: tuple[int, ...],
) -> None:
    targets = [TargetState(f"t{i}", weight=w) for i, w in enumerate(weights)]
    picks = first_picks(targets, 1000)
    total = sum(weights)
    for i, w in enumerate(weights):
        assert abs(picks[f"t{i}"] / 1000 - w / total) <= 0.05, (picks, weights)


def test_weighted_puts_every_healthy_target_in_the_order_once() -> None:
    targets = [TargetState("a", weight=5), TargetState("b", weight=1), TargetState("c", weight=0),
               TargetState("d", weight=2, cooling=True)]
    tried = order(targets, Strategy.WEIGHTED, random.Random(1).random)
    assert sorted(tried) == ["a", "b", "c"]
    assert tried[-1] == "c"  # weight 0: a fallback only


def test_a_cooling_weighted_target_gets_no_share() -> None:
    targets = [TargetState("a", weight=1, cooling=True), TargetState("b", weight=1)]
    assert first_picks(targets, 200) == Counter({"b": 200})


def test_sift_names_why_each_target_is_left_out() -> None:
    sifted = sift([TargetState("gone", known=False), TargetState("hot", cooling=True),
                   TargetState("cold", ready=False), TargetState("ok"),
                   TargetState("both", ready=False, cooling=True)])
    assert [t.name for t in sifted.kept] == ["ok"]
    assert sifted.left_out == {"gone": LeftOut.MISSING, "hot": LeftOut.COOLING,
                               "cold": LeftOut.NOT_READY, "both": LeftOut.COOLING}
