"""NodeRepo's operator writes (labels, cordon and drain flags, removal) on SQLite and PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from llmgw.core.errors import Forbidden, InvalidRequest, LlmgwError, Unauthenticated
from llmgw.core.types import Gpu, KeyScope, Replica, ReplicaState
from llmgw.store.store import Store
from tests.factories import NOW, api_key, node


def replica(id: str, node_id: str) -> Replica:
    return Replica(id=id, model="m1", node_id=node_id, state=ReplicaState.READY)


def test_get_returns_the_node_or_none(store: Store) -> None:
    store.nodes.upsert(node("a", labels={"zone": "eu"}), NOW)
    got = store.nodes.get("a")
    assert got is not None and got.labels == {"zone": "eu"} and got.heartbeat_at == NOW
    assert store.nodes.get("ghost") is None


def test_a_nodes_gpus_and_a_replicas_devices_are_kept_one_by_one(store: Store) -> None:
    h200 = Gpu(index=0, uuid="GPU-6f1c", name="NVIDIA H200", gpu_class="h200", memory_gb=139.8,
               free_gb=139.1, compute_capability="9.0")
    store.nodes.upsert(node("a").model_copy(update={"gpus": {"h200": 1}, "devices": [h200]}), NOW)
    store.replicas.create(replica("r1", "a").model_copy(
        update={"gpu_class": "h200", "gpus": 1, "devices": ["GPU-6f1c"]}), NOW)
    got = store.nodes.get("a")
    assert got is not None and got.devices == [h200] and not got.devices[0].declared
    assert store.replicas.list()[0].devices == ["GPU-6f1c"]


def test_set_labels_adds_changes_and_removes_and_bumps_the_revision(store: Store) -> None:
    store.nodes.upsert(node("a", labels={"zone": "eu", "old": "x"}), NOW)
    before = store.revision()
    got = store.nodes.set_labels("a", {"zone": "us", "tier": ""}, ["old", "never-there"])
    assert got is not None and got.labels == {"zone": "us", "tier": ""}
    assert store.nodes.list()[0].labels == {"zone": "us", "tier": ""}
    assert store.revision() > before


def test_set_labels_on_an_unknown_node_is_none_and_changes_nothing(store: Store) -> None:
    before = store.revision()
    assert store.nodes.set_labels("ghost", {"a": "b"}, []) is None
    assert store.revision() == before


def test_operator_labels_survive_the_agents_next_report(store: Store) -> None:
    store.nodes.upsert(node("a", labels={"agent": "yes"}), NOW)
    store.nodes.set_labels("a", {"rack": "r1"}, [])
    store.nodes.upsert(node("a", labels={"agent": "yes"}), NOW + timedelta(seconds=5))
    got = store.nodes.get("a")
    assert got is not None and got.labels == {"agent": "yes", "rack": "r1"}


def test_draining_implies_cordoned_and_uncordon_ends_a_drain(store: Store) -> None:
    store.nodes.upsert(node("a"), NOW)
    before = store.revision()
    drained = store.nodes.set_flags("a", draining=True)
    assert drained is not None and drained.draining and drained.cordoned
    assert store.revision() > before
    back = store.nodes.set_flags("a", cordoned=False)
    assert back is not None and not back.cordoned and not back.draining
    cordoned = store.nodes.set_flags("a", cordoned=True)
    assert cordoned is not None and cordoned.cordoned and not cordoned.draining
    with pytest.raises(ValueError):
        store.nodes.set_flags("a", cordoned=False, draining=True)


def test_flags_survive_the_agents_next_report(store: Store) -> None:
    store.nodes.upsert(node("a"), NOW)
    store.nodes.set_flags("a", draining=True)
    store.nodes.upsert(node("a"), NOW + timedelta(seconds=5))
    got = store.nodes.get("a")
    assert got is not None and got.cordoned and got.draining


def test_set_flags_on_an_unknown_node_is_none(store: Store) -> None:
    assert store.nodes.set_flags("ghost", cordoned=True) is None


def test_remove_deletes_the_node_and_only_its_replicas_in_one_write(store: Store) -> None:
    store.nodes.upsert(node("a"), NOW)
    store.nodes.upsert(node("b"), NOW)
    store.replicas.create(replica("r-a", "a"), NOW)
    store.replicas.create(replica("r-b", "b"), NOW)
    before = store.revision()
    assert store.nodes.remove("a") is True
    assert [n.id for n in store.nodes.list()] == ["b"]
    assert [r.id for r in store.replicas.list()] == ["r-b"]
    assert store.revision() == before + 1


def test_removing_an_unknown_node_is_false_and_touches_no_replica(store: Store) -> None:
    store.replicas.create(replica("r-x", "ghost"), NOW)  # a row whose node is already gone
    before = store.revision()
    assert store.nodes.remove("ghost") is False
    assert [r.id for r in store.replicas.list()] == ["r-x"]
    assert store.revision() == before


# --- join tokens bound to their node -----------------------------------------------------------


def join_token(store: Store, node_id: str | None = None) -> str:
    _, key = api_key(scope=KeyScope.NODE)
    # Names of live keys are unique: each token its own.
    store.keys.create(key.model_copy(update={"name": f"join-{key.id}", "created_at": NOW,
                                             "node_id": node_id}))
    return key.id


def test_a_first_report_binds_its_token_and_the_binding_holds(store: Store) -> None:
    token = join_token(store)
    before = store.revision()
    store.nodes.report(node("a"), NOW, "agent-1", token, timedelta(seconds=30))
    assert store.keys.get(token).node_id == "a" and store.revision() > before
    with pytest.raises(Forbidden, match="bound to node a"):
        store.nodes.report(node("b"), NOW, "agent-1", token, timedelta(seconds=30))
    assert store.nodes.get("b") is None
    with pytest.raises(InvalidRequest):
        store.nodes.report(node("a"), NOW, "", token, timedelta(seconds=30))


def test_tokens_racing_for_one_new_node_bind_only_one(store: Store) -> None:
    tokens = [join_token(store) for _ in range(8)]

    def claim(token: str) -> str:
        try:
            store.nodes.report(node("a"), NOW, "agent-1", token, timedelta(seconds=30))
        except LlmgwError as exc:
            return type(exc).__name__
        return "bound"

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(claim, tokens))
    assert sorted(outcomes) == ["Forbidden"] * 7 + ["bound"]
    assert [store.keys.get(t).node_id for t in tokens].count("a") == 1


def test_a_servers_own_node_refuses_tokens_and_takes_itself_back(store: Store) -> None:
    token = join_token(store, "own")
    store.nodes.upsert(node("own", cores=2), NOW)
    with pytest.raises(Forbidden, match="server's own node"):
        store.nodes.report(node("own", cores=64), NOW, "agent-1", token, timedelta(seconds=30))
    got = store.nodes.get("own")
    assert got is not None and got.cores == 2


def test_a_revoked_token_is_refused_even_before_caches_notice(store: Store) -> None:
    token = join_token(store)
    store.keys.revoke(token)
    with pytest.raises(Unauthenticated):
        store.nodes.report(node("a"), NOW, "agent-1", token, timedelta(seconds=30))
