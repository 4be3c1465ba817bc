"""Users signed in through the identity provider: their roles follow the provider's groups
until an admin sets one, and removing a user ends their sessions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from llmgw.core.audit import AuditKind, acting
from llmgw.core.errors import NotFound
from llmgw.core.users import Grant
from llmgw.store.store import Store

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
ISSUER = "https://idp.example.test"


def alice_signs_in(store: Store, grant: str | None, at: datetime = NOW) -> str:
    return store.users.signed_in(ISSUER, "alice", "alice@example.test", "Alice",
                                 Grant.parse(grant) if grant else None, at).id


def test_a_user_is_one_row_per_issuer_and_subject(any_store: Store) -> None:
    first = alice_signs_in(any_store, "viewer")
    again = alice_signs_in(any_store, "viewer", NOW + timedelta(hours=1))
    assert first == again
    other = any_store.users.signed_in("https://other.example.test", "alice", None, None, None, NOW)
    assert other.id != first and other.grant is None
    [user] = [u for u in any_store.users.list() if u.id == first]
    assert user.signed_in_at == NOW + timedelta(hours=1) and user.created_at == NOW


def test_the_role_follows_the_providers_groups_until_an_admin_sets_it(any_store: Store) -> None:
    user_id = alice_signs_in(any_store, "viewer")
    assert str(any_store.users.get(user_id).grant) == "viewer"
    alice_signs_in(any_store, "operator")  # promoted at the provider
    assert str(any_store.users.get(user_id).grant) == "operator"
    alice_signs_in(any_store, None)  # demoted to nothing at the provider
    assert any_store.users.get(user_id).grant is None
    with acting("admin (sk-llmgw-Ab3d…)"):
        set_by_hand = any_store.users.set_grant(user_id, Grant.parse("team-admin:research"), NOW)
    assert set_by_hand.role_source == "admin"
    alice_signs_in(any_store, "viewer")  # the groups no longer change it
    assert str(any_store.users.get(user_id).grant) == "team-admin:research"
    [entry] = any_store.audit.entries(kind=AuditKind.USER)
    assert (entry.action, entry.target, entry.before, entry.after) == (
        "role", user_id, {"email": "alice@example.test", "role": None, "role_source": "provider"},
        {"email": "alice@example.test", "role": "team-admin:research", "role_source": "admin"})


def test_removing_a_user_removes_their_sessions(any_store: Store) -> None:
    user_id = alice_signs_in(any_store, "admin")
    token, _ = any_store.sessions.start(user_id, "10.0.0.1", NOW, timedelta(hours=12))
    with acting("admin (sk-llmgw-Ab3d…)"):
        any_store.users.remove(user_id, NOW)
    assert any_store.sessions.find(token) is None
    with pytest.raises(NotFound):
        any_store.users.get(user_id)
    with pytest.raises(NotFound):
        any_store.users.set_grant(user_id, None, NOW)
