"""`build_routes`: the request path's routes from the catalog and the replicas."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from llmgw.core.engine_keys import EngineKeys
from llmgw.core.errors import NoReadyReplica
from llmgw.core.types import Replica, ReplicaState, Scaling
from llmgw.engines import llamacpp
from llmgw.gateway.snapshot import Refresher, build_routes
from llmgw.gateway.upstream.choice import choose
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.server.init import demo_judge
from llmgw.store.store import Store
from tests.factories import (
    KEY_SECRET,
    cpu_profile,
    gemma_model,
    local_model,
    node,
    qwen_guard_model,
    remote_model,
    replica_failed,
    replica_pending,
    replica_placed,
    replica_ready,
)

# Where the factories' replicas are placed: node "big", listening on 127.0.0.1.
NODES = {"big": "127.0.0.1"}


def by_id(routes: dict[str, Serving]) -> dict[str, Upstream]:
    return {u.id: u for r in routes.values() for u in r.upstreams}


# --- remote models -----------------------------------------------------------------------------


def test_a_remote_route_carries_the_key_from_the_servers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLMGW_PROVIDER_EXAMPLE", "sk-provider-123")
    model = remote_model(
        "gpt-4o-mini", base_url="https://api.example.com/v1/", upstream_name="gpt-4o-mini-2024"
    )

    route = build_routes([model], [], {}, addresses=NODES)["gpt-4o-mini"]

    [up] = route.upstreams
    assert up.base_url == "https://api.example.com/v1"
    assert up.headers == {"Authorization": "Bearer sk-provider-123"}
    assert route.upstream_model == "gpt-4o-mini-2024"
    assert route.unavailable == ""


def test_a_remote_provider_without_a_key_gets_no_authorization_header() -> None:
    route = build_routes([remote_model(api_key_env=None)], [], {}, addresses=NODES)["gpt-4o-mini"]
    [up] = route.upstreams
    assert up.headers == {}


def test_a_missing_key_variable_leaves_the_route_without_upstream_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LLMGW_PROVIDER_EXAMPLE", raising=False)
    routes = build_routes([remote_model(api_key_env="LLMGW_PROVIDER_EXAMPLE"), gemma_model()], [], {},
                          addresses=NODES)

    route = routes["gpt-4o-mini"]
    assert route.upstreams == ()
    assert "LLMGW_PROVIDER_EXAMPLE" in route.unavailable
    # The client's 503 carries the same explanation.
    with pytest.raises(NoReadyReplica, match="LLMGW_PROVIDER_EXAMPLE is not set"):
        choose(route)
    # One broken provider does not take the other models down with it.
    assert "gemma3-270m" in routes


@pytest.mark.parametrize("variable", ["PATH", "LLMGW_PROVIDER_", "LLMGW_PROVIDER_X=1"])
def test_a_stored_row_naming_a_variable_outside_the_rules_sends_nothing_upstream(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    # As a row written before the rule existed: the key is read only from allowed variables.
    monkeypatch.setenv("PATH", "/secret/bin:/usr/bin")
    monkeypatch.setenv("LLMGW_PROVIDER_", "sk-bare-prefix")
    routes = build_routes([remote_model(api_key_env=variable), gemma_model()], [], {}, addresses=NODES)

    route = routes["gpt-4o-mini"]
    assert route.upstreams == ()
    assert "LLMGW_PROVIDER_" in route.unavailable and "provider_key_env" in route.unavailable
    assert "/secret/bin" not in route.unavailable and "sk-bare" not in route.unavailable
    assert "gemma3-270m" in routes


def test_a_variable_the_admin_allowed_in_config_carries_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    model = remote_model(api_key_env="OPENAI_API_KEY")
    assert build_routes([model], [], {}, addresses=NODES)["gpt-4o-mini"].upstreams == ()
    [up] = build_routes([model], [], {}, provider_key_env=["OPENAI_API_KEY"],
                        addresses=NODES)["gpt-4o-mini"].upstreams
    assert up.headers == {"Authorization": "Bearer sk-openai"}


# --- local models ------------------------------------------------------------------------------


def test_only_ready_replicas_with_an_endpoint_are_upstreams() -> None:
    replicas = [
        replica_ready("r-ready", port=39001),
        replica_ready("r-no-endpoint", endpoint=None),
        replica_placed("r-starting", state=ReplicaState.STARTING, endpoint="http://127.0.0.1:39002/v1"),
        replica_placed("r-stopping", state=ReplicaState.STOPPING, endpoint="http://127.0.0.1:39003/v1"),
        replica_failed("r-failed", endpoint="http://127.0.0.1:39004/v1"),
        replica_pending("r-pending"),
        replica_ready("r-other-model", model="qwen3guard-0.6b", port=39005),
    ]

    route = build_routes([gemma_model(), qwen_guard_model()], replicas, {}, addresses=NODES)["gemma3-270m"]

    assert [(u.id, u.base_url) for u in route.upstreams] == [("r-ready", "http://127.0.0.1:39001/v1")]
    assert route.upstreams[0].headers == {}


def test_a_local_model_without_ready_replicas_explains_itself() -> None:
    replicas = [
        replica_failed("r1", error="engine exited with code 3"),
        replica_placed("r2", state=ReplicaState.STOPPING),
    ]

    route = build_routes([gemma_model()], replicas, {}, addresses=NODES)["gemma3-270m"]

    assert route.upstreams == ()
    # Stopping replicas are on their way out and do not explain anything.
    assert route.unavailable == "failed: engine exited with code 3"


def test_a_local_model_with_no_replica_at_all_says_why_by_its_scaling() -> None:
    off = local_model("off", replicas=0).model_copy(update={"scaling": Scaling(min=0, max=0)})
    models = [gemma_model(replicas=0), off, local_model("kept")]
    routes = build_routes(models, [], {}, addresses=NODES)
    assert routes["gemma3-270m"].upstreams == ()
    assert routes["gemma3-270m"].unavailable == "no replica is placed yet (the model starts on demand)"
    assert routes["off"].unavailable == "no replica is placed: scaling.max is 0"
    assert "scaling.min" in routes["kept"].unavailable


def test_every_catalog_model_gets_a_route_and_nothing_else() -> None:
    routes = build_routes([gemma_model(), qwen_guard_model()], [replica_ready("r", model="gone")], {},
                          addresses=NODES)
    assert set(routes) == {"gemma3-270m", "qwen3guard-0.6b"}


# --- counters survive a rebuild ----------------------------------------------------------------


def test_requests_in_flight_are_remembered_across_a_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGW_PROVIDER_EXAMPLE", "sk-provider-123")
    models = [gemma_model(replicas=2), remote_model()]
    replicas = [replica_ready("r1", port=39001), replica_ready("r2", port=39002)]
    first = build_routes(models, replicas, {}, addresses=NODES)
    ups = by_id(first)
    ups["r1"].outstanding = 3
    ups["remote:gpt-4o-mini"].outstanding = 7

    second = build_routes(models, [*replicas, replica_pending("r3")], ups, addresses=NODES)

    again = by_id(second)
    assert again["r1"] is ups["r1"] and again["r1"].outstanding == 3
    assert again["r2"] is ups["r2"]
    assert again["remote:gpt-4o-mini"].outstanding == 7
    # The balancer keeps steering away from the busy replica after the refresh.
    table = RoutingTable(second)
    assert choose(table.resolve("gemma3-270m"))[0].id == "r2"


def test_a_replica_that_moved_to_a_new_port_starts_a_fresh_count() -> None:
    first = build_routes([gemma_model()], [replica_ready("r1", port=39001)], {}, addresses=NODES)
    old = by_id(first)["r1"]
    old.outstanding = 2

    second = build_routes([gemma_model()], [replica_ready("r1", port=39555)], by_id(first), addresses=NODES)

    new = by_id(second)["r1"]
    assert new is not old
    assert new.base_url == "http://127.0.0.1:39555/v1"
    assert new.outstanding == 0


def test_a_rotated_provider_key_is_picked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMGW_PROVIDER_EXAMPLE", "sk-old")
    first = build_routes([remote_model()], [], {}, addresses=NODES)
    monkeypatch.setenv("LLMGW_PROVIDER_EXAMPLE", "sk-new")

    second = build_routes([remote_model()], [], by_id(first), addresses=NODES)

    [up] = second["gpt-4o-mini"].upstreams
    assert up.headers == {"Authorization": "Bearer sk-new"}


# --- the engine key goes only where the servers placed a replica --------------------------------


def test_each_replica_gets_the_engine_key_of_the_node_it_runs_on() -> None:
    keys = EngineKeys("llmgw-engine-root")
    replicas = [replica_ready("r-a", node_id="gpu-a", endpoint="http://10.0.0.7:9000/v1"),
                replica_ready("r-b", node_id="gpu-b", endpoint="http://10.0.0.8:9000/v1")]
    route = build_routes([gemma_model(replicas=2)], replicas, {}, keys,
                         addresses={"gpu-a": "10.0.0.7", "gpu-b": "10.0.0.8"})["gemma3-270m"]
    sent = {u.id: u.headers["Authorization"] for u in route.upstreams}
    assert sent == {"r-a": f"Bearer {keys.for_node('gpu-a')}",
                    "r-b": f"Bearer {keys.for_node('gpu-b')}"}
    assert keys.for_node("gpu-a") != keys.for_node("gpu-b")
    assert keys.root not in str(sent) and keys.root not in repr(keys)


def test_a_ready_replica_off_its_nodes_address_is_no_upstream() -> None:
    keys = EngineKeys("llmgw-engine-secret")
    replicas = [
        replica_ready("r-placed", node_id="gpu-1", endpoint="http://10.0.0.7:9000/v1"),
        # A node reported this one listening on another machine: neither requests nor the
        # engine key go there.
        replica_ready("r-elsewhere", node_id="gpu-1", endpoint="http://10.6.6.6:9000/v1"),
        replica_ready("r-userinfo", node_id="gpu-1", endpoint="http://10.0.0.7@10.6.6.6:1/v1"),
        replica_ready("r-gone", node_id="removed", endpoint="http://10.0.0.8:9000/v1"),
    ]

    route = build_routes([gemma_model(replicas=4)], replicas, {}, keys,
                         addresses={"gpu-1": "10.0.0.7", "other": "10.6.6.6"})["gemma3-270m"]

    assert [(u.id, u.headers) for u in route.upstreams] == [("r-placed", keys.headers("gpu-1"))]


def test_a_model_whose_only_ready_replica_is_off_its_node_says_so() -> None:
    replicas = [replica_ready("r1", node_id="gpu-1", endpoint="http://10.6.6.6:9000/v1")]
    route = build_routes([gemma_model()], replicas, {}, addresses={"gpu-1": "10.0.0.7"})["gemma3-270m"]
    assert route.upstreams == () and "off its node's address" in route.unavailable


# --- what a queued request waits for ----------------------------------------------------------


def test_a_starting_replica_says_where_the_model_is_loading() -> None:
    replicas = [replica_placed("r1", node_id="node-2"), replica_placed("r2", node_id="node-1"),
                replica_failed("r3", node_id="node-3")]
    route = build_routes([gemma_model(replicas=3)], replicas, {}, addresses=NODES)["gemma3-270m"]
    assert route.loading_on == "node-1, node-2"
    assert route.nowhere == ""


def test_a_model_whose_every_replica_waits_for_room_fits_nowhere_with_the_schedulers_reason() -> None:
    reason = "profile cpu: node big has 1.0 GB free, needs 8.0 GB"
    route = build_routes([gemma_model()], [replica_pending("r1", reason=reason)], {},
                         addresses=NODES)["gemma3-270m"]
    assert route.nowhere == reason and route.loading_on is None


@pytest.mark.parametrize("replicas", [
    [],  # cold: nothing placed yet
    [replica_pending("r1")],  # being placed, no reason yet
    [replica_pending("r1", reason="no node fits"), replica_placed("r2")],  # one is loading
])
def test_a_model_that_may_still_get_a_replica_does_not_fit_nowhere(replicas: list[Replica]) -> None:
    route = build_routes([gemma_model(replicas=0)], replicas, {}, addresses=NODES)["gemma3-270m"]
    assert route.nowhere == ""


async def test_every_new_routing_table_is_handed_to_the_refresh_hook(any_store: Store) -> None:
    now = datetime.now(UTC)
    any_store.nodes.upsert(node("big", address="127.0.0.1"), now)
    any_store.catalog.add(gemma_model(replicas=0), "test", now)
    tables: list[RoutingTable] = []
    refresher = Refresher(any_store, KEY_SECRET, on_refresh=tables.append)

    assert await refresher.refresh()
    assert not await refresher.refresh()  # nothing changed: no new table, nobody told
    any_store.replicas.create(replica_ready("r1"), now)
    assert await refresher.refresh()

    assert [t is refresher.current.table for t in tables] == [False, True]
    assert [len(t.resolve("gemma3-270m").upstreams) for t in tables] == [0, 1]


async def test_a_judge_replica_is_located_with_its_slots_and_what_it_runs_at_once(
    any_store: Store,
) -> None:
    now = datetime.now(UTC)
    any_store.nodes.upsert(node("big", address="127.0.0.1"), now)
    judge = demo_judge(Path("/models/demo.gguf"))  # --parallel 2 on one thread
    any_store.catalog.add(judge, "test", now)
    any_store.replicas.create(replica_ready("j1", judge.name, profile="cpu"), now)
    refresher = Refresher(any_store, KEY_SECRET)
    await refresher.refresh()

    [target] = refresher.locate_judge(judge.name)
    assert (target.slots, target.lanes) == (2, 1)


def test_a_replicas_slots_are_its_parallel_or_llama_servers_default() -> None:
    model = gemma_model(profiles=[cpu_profile("two", args=["--parallel", "2"]), cpu_profile()])
    replicas = [replica_ready("r-two", profile="two", port=39001),
                replica_ready("r-default", port=39002)]
    ups = by_id(build_routes([model], replicas, {}, addresses=NODES))
    assert ups["r-two"].slots == 2
    assert ups["r-default"].slots == llamacpp.DEFAULT_SLOTS
