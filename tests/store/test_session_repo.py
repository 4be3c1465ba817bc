"""The console's server-side sessions: found by the browser's token only, ended everywhere at
once, and audited with who signed in from where."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from llmgw.core.audit import AuditKind, acting
from llmgw.core.users import Grant
from llmgw.store.schema import console_sessions
from llmgw.store.session_repo import token_hash
from llmgw.store.store import Store

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
DAY = timedelta(hours=24)


def a_user(store: Store, subject: str = "alice") -> str:
    return store.users.signed_in("https://idp.example.test", subject, f"{subject}@example.test",
                                 None, Grant.parse("viewer"), NOW).id


def test_the_store_keeps_only_the_tokens_hash(any_store: Store) -> None:
    token, session = any_store.sessions.start(a_user(any_store), "10.0.0.1", NOW, DAY)
    with any_store.engine.connect() as conn:
        rows = conn.execute(select(console_sessions)).all()
    assert [r.token_hash for r in rows] == [token_hash(token)]
    assert all(token not in str(tuple(r)) for r in rows)
    assert any_store.sessions.find(token) == session
    assert any_store.sessions.find(token + "x") is None
    assert any_store.sessions.find(session.id) is None  # the public id is not a token


def test_ending_a_session_ends_it_for_every_server(any_store: Store) -> None:
    user_id = a_user(any_store)
    token, session = any_store.sessions.start(user_id, "10.0.0.1", NOW, DAY)
    with acting(f"user {user_id}"):
        assert any_store.sessions.end(session.id, "sign-out", NOW + timedelta(minutes=5))
        assert not any_store.sessions.end(session.id, "sign-out", NOW + timedelta(minutes=6))
    ended = any_store.sessions.find(token)
    assert ended is not None and not ended.live(NOW + timedelta(minutes=5), 3600)
    assert ended.end_reason == "sign-out"
    # Used after its end: nothing moves.
    any_store.sessions.seen(session.id, NOW + timedelta(minutes=7))
    assert any_store.sessions.find(token) == ended


def test_an_admin_ends_every_session_of_a_user_and_no_one_elses(any_store: Store) -> None:
    alice, bob = a_user(any_store, "alice"), a_user(any_store, "bob")
    alice_tokens = [any_store.sessions.start(alice, f"10.0.0.{i}", NOW, DAY)[0] for i in (1, 2)]
    bob_token, _ = any_store.sessions.start(bob, "10.0.0.9", NOW, DAY)
    with acting("admin (sk-llmgw-Ab3d…)"):
        assert any_store.sessions.end_for_user(alice, "ended by an admin", NOW) == 2
    assert all(not any_store.sessions.find(t).live(NOW, 3600) for t in alice_tokens)  # type: ignore[union-attr]
    assert any_store.sessions.find(bob_token).live(NOW, 3600)  # type: ignore[union-attr]
    assert [s.user_id for s in any_store.sessions.list(live_at=NOW)] == [bob]


def test_sign_ins_and_ends_are_audited_with_the_address(any_store: Store) -> None:
    user_id = a_user(any_store)
    with acting("alice@example.test"):
        _, session = any_store.sessions.start(user_id, "203.0.113.7", NOW, DAY)
        any_store.sessions.end(session.id, "sign-out", NOW)
    entries = any_store.audit.entries(kind=AuditKind.SESSION)
    assert [(e.action, e.by) for e in entries] == [("end", "alice@example.test"),
                                                   ("sign-in", "alice@example.test")]
    assert entries[1].after == {"user": user_id, "address": "203.0.113.7"}


def test_prune_drops_sessions_that_ended_or_expired_before_the_cutoff(any_store: Store) -> None:
    user_id = a_user(any_store)
    old, s_old = any_store.sessions.start(user_id, "10.0.0.1", NOW - 3 * DAY, DAY)
    live, _ = any_store.sessions.start(user_id, "10.0.0.1", NOW, DAY)
    assert any_store.sessions.prune(NOW - DAY) == 1
    assert any_store.sessions.find(old) is None and any_store.sessions.find(live) is not None
    assert s_old.expires_at == NOW - 2 * DAY
