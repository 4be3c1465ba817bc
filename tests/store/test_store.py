"""The store: migrations, the revision counter, and catalog rules that callers rely on."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from llmgw.core.errors import Conflict, ModelNotFound
from llmgw.core.protocol.models import ServeJob, ServeRequest
from llmgw.core.types import LocalSource, Model, Profile, ProviderApi, RemoteSource, ReplicaState, Scaling
from llmgw.store.db import schema_exists
from llmgw.store.store import Store

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def small_model(name: str = "m1") -> Model:
    return Model(name=name, source=LocalSource(path="/models/m1.gguf"), profiles=[Profile(name="cpu")])



def test_migrations_create_the_schema_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert not schema_exists(url)
    Store.open(url).close()
    assert schema_exists(url)
    Store.open(url).close()  # a second upgrade is a no-op, not an error


def test_every_change_bumps_the_revision(store: Store) -> None:
    seen = [store.revision()]
    store.catalog.add(small_model(), "test", NOW)
    seen.append(store.revision())
    store.catalog.set_scaling("m1", Scaling(min=2, max=2), "test", NOW)
    seen.append(store.revision())
    store.catalog.remove("m1")
    seen.append(store.revision())
    assert seen == sorted(set(seen))  # strictly increasing


def test_adding_a_taken_name_conflicts_and_keeps_the_first(store: Store) -> None:
    store.catalog.add(small_model(), "operator", NOW)
    with pytest.raises(Conflict):
        store.catalog.add(small_model(), "someone else", NOW)
    assert store.catalog.get("m1").by == "operator"


def test_model_round_trips_with_who_and_when(store: Store) -> None:
    store.catalog.add(small_model(), "operator", NOW)
    got = store.catalog.get("m1")
    assert got.profiles == small_model().profiles
    assert got.by == "operator" and got.created_at == NOW


def test_removing_a_model_marks_its_replicas_stopping(store: Store) -> None:
    from llmgw.core.types import Replica

    store.catalog.add(small_model(), "op", NOW)
    store.replicas.create(Replica(id="r1", model="m1", node_id="local", state=ReplicaState.READY), NOW)
    store.catalog.remove("m1")
    assert [r.state for r in store.replicas.list()] == [ReplicaState.STOPPING]
    with pytest.raises(ModelNotFound):
        store.catalog.remove("m1")


def test_committed_state_survives_reopening(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'llmgw.db'}"
    s = Store.open(url)
    s.catalog.add(small_model(), "op", NOW)
    s.close()
    again = Store.open(url)
    assert [m.name for m in again.catalog.list()] == ["m1"]
    again.close()


def test_servers_adding_to_a_new_row_at_once_lose_nothing(store: Store) -> None:
    # Two servers flush the same key's first minute at the same moment: one row, both counted.
    from concurrent.futures import ThreadPoolExecutor

    from llmgw.core.types import UsageRow

    def flush(_: int) -> None:
        for minute in range(20):
            store.usage.add_rates({("key-1", minute): (1, 10)})
            store.usage.add_usage([UsageRow(key_id="key-1", model="m1", day=f"2026-01-{minute + 1:02d}",
                                                requests=1)])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(flush, range(4)))
    assert set(store.usage.rates(list(range(20))).values()) == {(4, 40)}
    assert {r.requests for r in store.usage.usage(key_id="key-1")} == {4}


def test_a_stored_job_that_breaks_a_newer_name_rule_does_not_hide_the_others(store: Store) -> None:
    # Serve jobs took any name before names were checked at the API: such a row stays readable
    # around it (the job list, resuming and the judge keeper all list jobs).
    old = ServeRequest.model_construct(name="a/../b", source=LocalSource(path="/m.gguf"))
    store.jobs.create(ServeJob.model_construct(id="job-old", request=old), NOW)
    good = ServeJob(id="job-good", request=ServeRequest(name="b", source=LocalSource(path="/m.gguf")))
    store.jobs.create(good, NOW)
    assert [j.id for j in store.jobs.list()] == ["job-good"]


def test_a_remote_model_stored_before_dialects_existed_reads_as_openai(store: Store) -> None:
    # Rows written before `api` was a field have none in their spec: they were all OpenAI-compatible.
    from sqlalchemy import insert

    from llmgw.store.schema import models

    spec = {"source": {"kind": "remote", "base_url": "https://api.example.com/v1",
                       "api_key_env": "LLMGW_PROVIDER_X", "model": None},
            "profiles": [], "scaling": {"min": 0, "max": 1}, "guard": False}
    with store.engine.begin() as conn:
        conn.execute(insert(models).values(name="old", spec=spec, by="op", created_at=NOW,
                                           updated_at=NOW))
    source = store.catalog.get("old").source
    assert isinstance(source, RemoteSource) and source.api == ProviderApi.OPENAI


def test_a_remote_model_speaking_anthropic_round_trips(store: Store) -> None:
    model = Model(name="claude", source=RemoteSource(base_url="https://api.anthropic.com/v1",
                                                     api_key_env="LLMGW_PROVIDER_ANTHROPIC",
                                                     api=ProviderApi.ANTHROPIC))
    store.catalog.add(model, "op", NOW)
    [got] = store.catalog.list()
    assert got.source == model.source
    assert isinstance(got.source, RemoteSource) and got.source.api == ProviderApi.ANTHROPIC
