"""The audit log in the store (SQLite and PostgreSQL): an entry only with its change, only for
someone acting, never a secret; filters; retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from llmgw.core.audit import AuditKind, acting
from llmgw.core.redact import scrubbed
from llmgw.core.types import Profile, Scaling
from llmgw.store.audit_repo import record
from llmgw.store.schema import models
from llmgw.store.store import Store
from tests.factories import local_model as make_model
from tests.factories import remote_model

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_a_change_is_logged_only_while_someone_acts(store: Store) -> None:
    store.catalog.add(make_model("quiet"), "server init", NOW)  # not an admin API write
    with acting("alice (sk-a…)"):
        store.catalog.add(make_model("m"), "alice (sk-a…)", NOW)
    # A keeper refitting a model's profiles (no one acting) is the control plane's own write.
    store.catalog.set_profiles("m", [Profile(name="gpu", gpu=1)], "judge keeper", NOW)

    [entry] = store.audit.entries()
    assert (entry.by, entry.kind, entry.action, entry.target) == (
        "alice (sk-a…)", AuditKind.MODEL, "add", "m")
    assert entry.at == NOW and entry.before is None and entry.after is not None


def test_a_change_rolled_back_leaves_no_entry(store: Store) -> None:
    with acting("alice (sk-a…)"), pytest.raises(RuntimeError), store.engine.begin() as conn:
        record(conn, AuditKind.MODEL, "scale", "m", {"min": 0}, {"min": 1})
        raise RuntimeError("the change failed after its entry was written")
    assert store.audit.entries() == []


def test_secrets_are_dropped_at_any_depth(store: Store) -> None:
    given = {"name": "k", "hash": "h", "key_secret": "s", "source": {"api_key": "sk-live",
             "api_key_env": "LLMGW_PROVIDER_X", "headers": [{"join_token": "t", "ok": 1}]}}
    assert scrubbed(given) == {"name": "k", "source": {"api_key_env": "LLMGW_PROVIDER_X",
                                                       "headers": [{"ok": 1}]}}
    with acting("alice (sk-a…)"), store.engine.begin() as conn:
        record(conn, AuditKind.KEY, "create", "k", None, given)
    [entry] = store.audit.entries()
    assert "sk-live" not in repr(entry) and "'h'" not in repr(entry)


def test_a_url_keeps_neither_its_credentials_nor_its_query() -> None:
    assert scrubbed({"base_url": "https://user:pw@api.example.com:8443/v1?key=sk-live"}) == {
        "base_url": "https://***@api.example.com:8443/v1?key=***"}
    assert scrubbed({"base_url": "https://api.example.com/v1"}) == {
        "base_url": "https://api.example.com/v1"}


def test_entries_are_filtered_newest_first(store: Store) -> None:
    for at, who, name in [(NOW - timedelta(days=2), "alice (sk-a…)", "a"),
                          (NOW - timedelta(hours=1), "bob_100% (sk-b…)", "b"),
                          (NOW, "alice (sk-a…)", "c")]:
        with acting(who):
            store.catalog.add(make_model(name), who, at)
    assert [e.target for e in store.audit.entries()] == ["c", "b", "a"]
    assert [e.target for e in store.audit.entries(who="alice")] == ["c", "a"]
    # `who` is a plain substring: LIKE's wildcards in it match only themselves.
    assert [e.target for e in store.audit.entries(who="_100%")] == ["b"]
    assert store.audit.entries(who="b%b") == []
    assert [e.target for e in store.audit.entries(since=NOW - timedelta(days=1))] == ["c", "b"]
    assert [e.target for e in store.audit.entries(kind=AuditKind.MODEL, limit=1)] == ["c"]
    assert store.audit.entries(kind=AuditKind.KEY) == []
    assert [e.target for e in store.audit.entries(target="b")] == ["b"]


def test_prune_drops_only_entries_older_than_the_cutoff(store: Store) -> None:
    with acting("alice (sk-a…)"):
        store.catalog.add(make_model("old"), "alice", NOW - timedelta(days=91))
        store.catalog.add(make_model("new"), "alice", NOW - timedelta(days=89))
        store.catalog.set_scaling("new", Scaling(min=1, max=1), "alice", NOW)
    assert store.audit.prune(NOW - timedelta(days=90)) == 1
    assert [e.target for e in store.audit.entries()] == ["new", "new"]
    # Pruning the log never touches what it describes.
    with store.engine.connect() as conn:
        assert {r.name for r in conn.execute(select(models.c.name))} == {"old", "new"}


def test_a_remote_models_entry_names_its_key_variable_not_a_key(store: Store) -> None:
    with acting("alice (sk-a…)"):
        store.catalog.add(remote_model("gpt", api_key_env="LLMGW_PROVIDER_OPENAI"), "alice", NOW)
    [entry] = store.audit.entries()
    assert entry.after is not None and entry.after["source"]["api_key_env"] == "LLMGW_PROVIDER_OPENAI"
