"""The cooldown rule, with times as plain numbers."""

from __future__ import annotations

from llmgw.core.routes import Cooldown
from llmgw.gateway.upstream.cooldown import Cooldowns, TargetHealth, after_failure, after_success

RULE = Cooldown(failures=3, window_s=60, cooldown_s=30)


def test_the_nth_failure_within_the_window_starts_a_cooldown() -> None:
    h = TargetHealth()
    for t in (0.0, 10.0):
        h = after_failure(h, RULE, t)
        assert not h.cooling(t)
    h = after_failure(h, RULE, 20.0)
    assert h.cooling(20.0) and h.cooling(49.9)
    assert not h.cooling(50.0)  # 30 s after the third failure
    assert h.failures == ()  # back from its cooldown, it gets three fresh tries


def test_failures_older_than_the_window_are_forgotten() -> None:
    h = TargetHealth()
    for t in (0.0, 30.0, 61.0):  # the first is 61 s old by the third
        h = after_failure(h, RULE, t)
    assert not h.cooling(61.0)
    assert h.failures == (30.0, 61.0)


def test_a_success_starts_the_count_afresh() -> None:
    h = after_failure(after_failure(TargetHealth(), RULE, 0.0), RULE, 1.0)
    h = after_failure(after_success(h), RULE, 2.0)
    assert not h.cooling(2.0) and h.failures == (2.0,)


def test_cooldowns_are_kept_per_route_and_target_and_go_with_their_route() -> None:
    c = Cooldowns()
    one = Cooldown(failures=1, window_s=60, cooldown_s=30)
    assert c.failed("chat", "a", one, 100.0) is True
    assert c.failed("chat", "a", one, 101.0) is False  # already cooling: no new cooldown counted
    assert c.cooling("chat", "a", 110.0)
    assert not c.cooling("other", "a", 110.0) and not c.cooling("chat", "b", 110.0)
    assert not c.quiet("chat") and c.quiet("other")
    c.forget_route("chat")
    assert not c.cooling("chat", "a", 110.0) and c.quiet("chat")


def test_a_target_that_answers_after_its_cooldown_leaves_no_state() -> None:
    c = Cooldowns()
    c.failed("chat", "a", RULE, 0.0)
    c.succeeded("chat", "a", 1.0)
    assert c.quiet("chat")  # requests skip the cooldown checks again
    one = Cooldown(failures=1, window_s=60, cooldown_s=30)
    c.failed("chat", "a", one, 2.0)
    c.succeeded("chat", "a", 3.0)  # a request sent before it cooled down came back fine
    assert c.cooling("chat", "a", 3.0) and not c.quiet("chat")
