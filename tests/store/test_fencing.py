"""Leader-only writes carry the leader's epoch and are refused once it is stale (both databases)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from llmgw.core.errors import StaleEpoch
from llmgw.core.protocol.models import ServeJob, ServeRequest
from llmgw.core.types import LocalSource, Replica
from llmgw.store.lease_repo import fence
from llmgw.store.store import Store
from tests.factories import NOW, local_model

TTL = timedelta(seconds=15)



def test_a_deposed_leaders_writes_are_refused_and_leave_nothing(store: Store) -> None:
    first = store.leases.acquire("server-a", NOW, TTL)
    assert first is not None
    stale = fence("server-a", first.epoch, lambda: NOW)
    store.replicas.create(Replica(id="r1", model="m1"), NOW, stale)  # still the leader: written

    # server-a pauses past its TTL; server-b takes over at the next epoch.
    later = NOW + TTL + timedelta(seconds=1)
    second = store.leases.acquire("server-b", later, TTL)
    assert second is not None and second.epoch == first.epoch + 1
    late = fence("server-a", first.epoch, lambda: later)

    with pytest.raises(StaleEpoch, match=f"epoch {first.epoch} is stale"):
        store.replicas.create(Replica(id="r2", model="m1"), later, late)
    with pytest.raises(StaleEpoch):
        store.replicas.update("r1", later, late, last_error="written by a deposed leader")
    with pytest.raises(StaleEpoch):
        store.replicas.delete("r1", late)
    request = ServeRequest(name="j", source=LocalSource(path="/m.gguf"))
    with pytest.raises(StaleEpoch):
        store.jobs.create(ServeJob(id="job-1", request=request, created_at=later), later, late)
    store.catalog.add(local_model("m1"), "test", NOW)
    with pytest.raises(StaleEpoch):
        store.catalog.set_profiles("m1", [], "deposed", later, late)

    assert [(r.id, r.last_error) for r in store.replicas.list()] == [("r1", None)]
    assert store.jobs.list() == []
    assert store.catalog.get("m1").profiles == local_model("m1").profiles
    # The new leader's writes go through.
    store.replicas.create(Replica(id="r3", model="m1"), later,
                          fence("server-b", second.epoch, lambda: later))
    assert {r.id for r in store.replicas.list()} == {"r1", "r3"}


def test_an_expired_lease_fences_even_its_own_holder(store: Store) -> None:
    lease = store.leases.acquire("server-a", NOW, TTL)
    assert lease is not None
    # Nobody took over, but the lease ran out: the holder may no longer act as leader.
    expired = fence("server-a", lease.epoch, lambda: NOW + TTL + timedelta(seconds=1))
    with pytest.raises(StaleEpoch):
        store.replicas.create(Replica(id="r1", model="m1"), NOW, expired)
    assert store.replicas.list() == []
