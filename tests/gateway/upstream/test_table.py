"""The balancer (`pick`), the routing table, and why a model has no ready replica."""

from __future__ import annotations

import pytest

from llmgw.core.errors import ModelNotFound, NoReadyReplica
from llmgw.core.types import ReplicaState
from llmgw.gateway.upstream.choice import choose, pick
from llmgw.gateway.upstream.table import (
    RoutingTable,
    Serving,
    Upstream,
    failing_reason,
    unavailable_reason,
)
from tests.factories import gemma_model, replica_failed, replica_pending, replica_placed


def upstreams(*outstanding: int) -> tuple[Upstream, ...]:
    return tuple(
        Upstream(f"rep-{i}", f"http://127.0.0.1:{39000 + i}/v1", outstanding=n)
        for i, n in enumerate(outstanding)
    )


# --- pick --------------------------------------------------------------------------------------


def test_pick_takes_the_upstream_with_fewest_requests_in_flight() -> None:
    ups = upstreams(3, 1, 2)
    for turn in range(3):
        chosen = pick(ups, frozenset(), turn)
        assert chosen is not None and chosen.id == "rep-1"


def test_pick_rotates_among_equally_busy_upstreams() -> None:
    ups = upstreams(0, 0, 0)
    chosen = [pick(ups, frozenset(), turn) for turn in range(6)]
    assert [u.id for u in chosen if u] == ["rep-0", "rep-1", "rep-2", "rep-0", "rep-1", "rep-2"]


def test_pick_rotates_only_among_the_least_busy() -> None:
    ups = upstreams(0, 5, 0)
    chosen = {u.id for turn in range(6) if (u := pick(ups, frozenset(), turn))}
    assert chosen == {"rep-0", "rep-2"}


def test_pick_skips_excluded_upstreams_even_when_they_are_idle() -> None:
    ups = upstreams(0, 4)
    chosen = pick(ups, frozenset({"rep-0"}), 0)
    assert chosen is not None and chosen.id == "rep-1"


def test_pick_finds_nothing_when_everything_is_excluded_or_there_is_nothing() -> None:
    ups = upstreams(0, 0)
    assert pick(ups, frozenset({"rep-0", "rep-1"}), 0) is None
    assert pick((), frozenset(), 0) is None


# --- RoutingTable ------------------------------------------------------------------------------


def test_resolve_finds_a_catalog_model() -> None:
    route = Serving(gemma_model(), upstreams(0))
    assert RoutingTable({"gemma3-270m": route}).resolve("gemma3-270m") is route


def test_resolve_of_an_unknown_model_is_a_404_naming_it() -> None:
    table = RoutingTable({"gemma3-270m": Serving(gemma_model(), upstreams(0))})

    with pytest.raises(ModelNotFound) as caught:
        table.resolve("gpt-5")

    err = caught.value
    assert err.status == 404
    assert err.code == "model_not_found"
    assert err.param == "model"
    assert "gpt-5" in err.message


def test_choose_spreads_successive_requests_over_idle_replicas() -> None:
    route = Serving(gemma_model(), upstreams(0, 0))
    assert {choose(route)[0].id for _ in range(4)} == {"rep-0", "rep-1"}


def test_choose_prefers_the_replica_with_fewer_requests_in_flight() -> None:
    route = Serving(gemma_model(), upstreams(2, 0))
    assert [choose(route)[0].id for _ in range(3)] == ["rep-1"] * 3


def test_choose_retries_on_another_replica() -> None:
    route = Serving(gemma_model(), upstreams(0, 0))
    first, _ = choose(route)
    second, _ = choose(route, exclude=frozenset({first.id}))
    assert second.id != first.id


def test_choose_without_any_upstream_is_a_503_with_the_reason() -> None:
    route = Serving(gemma_model(), (), unavailable="pending: needs 4 cores; node small has only 2")

    with pytest.raises(NoReadyReplica) as caught:
        choose(route)

    err = caught.value
    assert err.status == 503
    assert err.code == "no_ready_replica"
    assert "gemma3-270m" in err.message
    assert "needs 4 cores; node small has only 2" in err.message


def test_choose_when_every_replica_was_tried_says_there_is_none_left_to_retry() -> None:
    route = Serving(gemma_model(), upstreams(0))

    with pytest.raises(NoReadyReplica) as caught:
        choose(route, exclude=frozenset({"rep-0"}))

    assert caught.value.status == 503
    assert "no other ready replica" in caught.value.message


# --- unavailable_reason ------------------------------------------------------------------------


def test_no_replica_at_all_hints_at_scaling() -> None:
    assert "scaling.min" in unavailable_reason([])


def test_a_pending_replica_says_why_it_waits() -> None:
    reason = unavailable_reason([replica_pending(reason="does not fit: needs 4 cores")])
    assert reason == "pending: does not fit: needs 4 cores"


def test_a_pending_replica_without_a_reason_is_waiting_to_be_placed() -> None:
    assert unavailable_reason([replica_pending()]) == "pending: waiting to be placed"


def test_a_failed_replica_says_what_went_wrong() -> None:
    reason = unavailable_reason([replica_failed(error="engine exited with code 1")])
    assert reason == "failed: engine exited with code 1"


def test_a_failed_replica_includes_the_engines_last_output() -> None:
    # The supervisor's message for a crashed engine: the useful part is its last output line.
    error = "engine exited with code 3; last output:\nloading model\nfatal: out of memory"
    reason = unavailable_reason([replica_failed(error=error)])
    assert "fatal: out of memory" in reason


def test_a_very_long_error_is_cut_short() -> None:
    reason = unavailable_reason([replica_failed(error="x" * 5000)])
    assert len(reason) < 300


def test_starting_replicas_are_named_by_state_and_duplicates_collapse() -> None:
    replicas = [
        replica_placed("r1", state=ReplicaState.STARTING),
        replica_placed("r2", state=ReplicaState.STARTING),
        replica_failed("r3", error="engine killed by signal 9"),
    ]
    assert unavailable_reason(replicas) == "failed: engine killed by signal 9; starting"


def test_a_refused_upstream_goes_last_until_its_time_is_up() -> None:
    a, b = Upstream("a", "http://a"), Upstream("b", "http://b", outstanding=3)
    a.down_until = 100.0
    # b is busier, but a just refused a connection (its node may be gone).
    assert pick((a, b), frozenset(), 0, now=50.0) is b
    # When a is the only one left it is still tried: better than refusing the request.
    assert pick((a, b), frozenset({"b"}), 0, now=50.0) is a
    assert pick((a, b), frozenset(), 0, now=100.5) is a


def test_an_upstream_never_shows_its_credentials_in_a_repr() -> None:
    up = Upstream("remote:openai", "https://api.example/v1",
                  headers={"Authorization": "Bearer sk-provider-s3cret"})
    assert "s3cret" not in repr(up)


# --- failing -----------------------------------------------------------------------------------

SIGILL_ERROR = ("llama-server stopped with an illegal instruction (SIGILL): rebuild it\n"
                "engine log: /data/logs/rep-1.log\nlast output:\nload_tensors: CPU model buffer")


def test_a_model_whose_every_replica_failed_is_failing_with_the_first_line_of_each_reason() -> None:
    replicas = [replica_failed("r1", error=SIGILL_ERROR), replica_failed("r2", error=SIGILL_ERROR)]
    assert failing_reason(replicas) == ("llama-server stopped with an illegal instruction (SIGILL): "
                                        "rebuild it")


@pytest.mark.parametrize("other", [
    replica_placed("r2", state=ReplicaState.STARTING),
    replica_placed("r2", state=ReplicaState.READY),
    replica_pending("r2"),
])
def test_a_model_with_a_replica_that_may_still_serve_is_not_failing(other: object) -> None:
    assert failing_reason([replica_failed("r1", error=SIGILL_ERROR), other]) == ""  # type: ignore[list-item]


def test_a_model_with_no_replica_is_not_failing() -> None:
    assert failing_reason([]) == ""
