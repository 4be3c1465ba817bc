"""Writes of one named entry (models, routes, teams, policies, judges) on each backend: one
audit entry with the stored spec before and the new one after, one revision bump, the row's
times; a write that fails leaves neither entry nor bump."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from llmgw.core.audit import AuditKind, acting
from llmgw.core.errors import Conflict, NotFound
from llmgw.core.guard import Policy
from llmgw.core.routes import RouteSpec, Target
from llmgw.core.types import Limits, Team
from llmgw.store.schema import policies
from llmgw.store.store import Store
from llmgw.store.upsert import upsert
from tests.factories import local_model

T1 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T2 = T1 + timedelta(hours=1)
WHO = "alice (sk-a…)"


def route(targets: list[str]) -> RouteSpec:
    return RouteSpec(name="chat", targets=[Target(model=t) for t in targets])


def team(rpm: int) -> Team:
    return Team(name="red", limits=Limits(rpm=rpm))


# (audit kind, put(store, version, now, replace), get(store)) for the two add-or-replace entries.
PUTS: dict[str, tuple[AuditKind, Callable[..., Any], Callable[[Store], Any]]] = {
    "route": (AuditKind.ROUTE,
              lambda s, v, now, replace: s.routes.put(route(["a", "b"][:v]), WHO, now,
                                                      replace=replace),
              lambda s: s.routes.get("chat")),
    "team": (AuditKind.TEAM,
             lambda s, v, now, replace: s.teams.put(team(v * 10), WHO, now, replace=replace),
             lambda s: s.teams.get("red")),
}


@pytest.mark.parametrize("what", PUTS)
def test_adding_then_replacing_logs_each_with_before_and_after(store: Store, what: str) -> None:
    kind, put, get = PUTS[what]
    rev = store.revision()
    with acting(WHO):
        put(store, 1, T1, False)
        assert store.revision() == rev + 1
        put(store, 2, T2, True)
        assert store.revision() == rev + 2
    stored = get(store)
    assert (stored.by, stored.created_at, stored.updated_at) == (WHO, T1, T2)
    changed, added = store.audit.entries()
    assert (added.kind, added.action, added.at, added.before) == (kind, "add", T1, None)
    assert (changed.kind, changed.action, changed.at) == (kind, "set", T2)
    assert changed.before == added.after and changed.after != added.after


@pytest.mark.parametrize("what", PUTS)
def test_a_taken_or_missing_name_writes_nothing(store: Store, what: str) -> None:
    _, put, get = PUTS[what]
    rev = store.revision()
    with acting(WHO):
        with pytest.raises(NotFound):  # replacing one that is not there
            put(store, 1, T1, True)
        assert store.revision() == rev and store.audit.entries() == []
        put(store, 1, T1, False)
        rev, entries = store.revision(), store.audit.entries()
        with pytest.raises(Conflict):
            put(store, 2, T2, False)
    assert store.revision() == rev and store.audit.entries() == entries
    assert get(store).updated_at == T1


def test_a_model_added_twice_is_logged_and_bumped_once(store: Store) -> None:
    with acting(WHO):
        store.catalog.add(local_model("m"), WHO, T1)
        rev = store.revision()
        with pytest.raises(Conflict):
            store.catalog.add(local_model("m"), WHO, T2)
    assert store.revision() == rev
    [added] = store.audit.entries()
    assert (added.action, added.target, added.before, added.at) == ("add", "m", None, T1)
    model = store.catalog.get("m")
    assert (model.created_at, model.updated_at) == (T1, T1)


def test_setting_a_policy_creates_or_replaces_it(store: Store) -> None:
    rev = store.revision()
    with acting(WHO):
        store.guard.set_policy(Policy(name="p", judges=["j"], budget_ms=3000), WHO, T1)
        store.guard.set_policy(Policy(name="p", judges=["j"], budget_ms=4000), WHO, T2)
    assert store.revision() == rev + 2
    [policy] = store.guard.policies()
    assert (policy.budget_ms, policy.by, policy.updated_at) == (4000, WHO, T2)
    replaced, made = store.audit.entries()
    assert made.before is None and made.after is not None and made.after["budget_ms"] == 3000
    assert replaced.before == made.after and replaced.after is not None
    assert replaced.after["budget_ms"] == 4000 and replaced.action == "set"


@pytest.mark.parametrize("existing", [True, False], ids=["existing", "new"])
def test_two_writers_setting_one_policy_at_once_both_succeed(store: Store, existing: bool) -> None:
    """The second waits for the first and then replaces its policy. (On PostgreSQL the second
    used to fail: its delete missed the row the first had just inserted, its insert collided.)"""
    if existing:
        store.guard.set_policy(Policy(name="p", judges=["j"]), WHO, T1)
    rev = store.revision()
    failed: list[BaseException] = []

    def second() -> None:
        try:
            store.guard.set_policy(Policy(name="p", judges=["second"]), "bob", T2)
        except BaseException as exc:
            failed.append(exc)

    with store.engine.connect() as conn, conn.begin():
        upsert(conn, policies, "p", {"judges": ["first"]}, write="replace",
               kind=AuditKind.POLICY, action="set", by=WHO, now=T1)
        writer = threading.Thread(target=second)
        writer.start()
        writer.join(0.5)
        assert writer.is_alive()  # waiting for the first to commit
    writer.join(10)
    assert not writer.is_alive() and failed == []
    [policy] = store.guard.policies()
    assert (policy.judges, policy.by) == (["second"], "bob")
    assert store.revision() == rev + 2
