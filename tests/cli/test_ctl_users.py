"""`llmgw ctl user …` against a running server. Users come only from signing in to the console,
so the tests seed them in the server's own database, as a sign-in would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from llmgw.core.settings import load
from llmgw.core.users import Grant
from llmgw.store.store import Store
from tests.cli.test_ctl_guard import flat, row
from tests.support.server_process import LlmgwServer

ISSUER = "https://idp.example.test"
DAY = timedelta(days=1)


def ctl_json(server: LlmgwServer, *args: str) -> Any:
    return json.loads(server.ctl("--json", *args).stdout)


@pytest.fixture
def store(bare_server: LlmgwServer) -> Iterator[Store]:
    """The running server's database, to seed what a sign-in would write."""
    data = bare_server.data_dir
    s = Store.open(load(data).database_url(data), migrate_schema=False)
    try:
        yield s
    finally:
        s.close()


def signed_in(store: Store, subject: str, role: str | None, sessions: int = 0) -> str:
    """A user `subject`@x as the identity provider signed them in, with `sessions` live console
    sessions; their id."""
    now = datetime.now(UTC)
    user = store.users.signed_in(ISSUER, subject, f"{subject}@x", subject.title(),
                                 Grant.parse(role) if role else None, now)
    for _ in range(sessions):
        store.sessions.start(user.id, "10.0.0.7", now, DAY, now + DAY)
    return user.id


def test_list_show_role_signout_and_remove(bare_server: LlmgwServer, store: Store) -> None:
    alice = signed_in(store, "alice", "admin")
    bob = signed_in(store, "bob", "operator", sessions=2)
    carol = signed_in(store, "carol", None)

    listed = bare_server.ctl("user", "list").stdout
    assert row(listed, "alice@x")[1:6] == [alice, "Alice", "admin", "provider", "0"]
    assert row(listed, "bob@x")[1:6] == [bob, "Bob", "operator", "provider", "2"]
    assert row(listed, "carol@x")[3] == "none"  # signed in, no access
    assert [u["email"] for u in ctl_json(bare_server, "user", "list")["data"]] == [
        "alice@x", "bob@x", "carol@x"]

    # By email or by id; a role set by hand says so.
    changed = bare_server.ctl("user", "role", "bob@x", "viewer").stdout
    assert row(changed, "bob@x")[3:5] == ["viewer", "admin"]
    assert row(bare_server.ctl("user", "show", "bob@x").stdout, "bob@x")[3:5] == ["viewer", "admin"]
    assert store.users.get(bob).grant == Grant.parse("viewer")
    shown = ctl_json(bare_server, "user", "show", bob)
    assert (shown["role"], shown["role_source"], shown["sessions"]) == ("viewer", "admin", 2)
    team = ctl_json(bare_server, "user", "role", "carol@x", "team-admin:research")
    assert (team["role"], team["role_source"]) == ("team-admin:research", "admin")
    assert ctl_json(bare_server, "user", "role", "carol@x", "none")["role"] is None
    assert row(bare_server.ctl("user", "show", "carol@x").stdout, "carol@x")[3] == "none"

    out = bare_server.ctl("user", "signout", "bob@x").stdout
    assert flat(out) == f"ended 2 console sessions of bob@x ({bob})"
    assert store.sessions.list(bob, live_at=datetime.now(UTC)) == []
    assert all(s.ended_at is not None for s in store.sessions.list(bob))
    assert ctl_json(bare_server, "user", "signout", bob) == {"user": bob, "ended": 0}
    assert row(bare_server.ctl("user", "show", bob).stdout, "bob@x")[5] == "0"

    assert flat(bare_server.ctl("user", "remove", "bob@x").stdout) == f"removed user bob@x ({bob})"
    assert [u.id for u in store.users.list()] == [alice, carol]
    assert "bob@x" not in bare_server.ctl("user", "list").stdout
    proc = bare_server.ctl("user", "show", "bob@x", check=False)
    assert proc.returncode == 1 and "404" in flat(proc.stderr) and "Traceback" not in proc.stderr

    for who in ("alice", "carol"):
        bare_server.ctl("user", "remove", f"{who}@x")
    assert ctl_json(bare_server, "user", "list") == {"data": []}


def test_only_a_verified_email_finds_a_user(bare_server: LlmgwServer, store: Store) -> None:
    alice = signed_in(store, "alice", None)
    # An account whose email the provider did not verify is stored without it.
    mallory = store.users.signed_in(ISSUER, "mallory", None, "Mallory", None, datetime.now(UTC))
    listed = bare_server.ctl("user", "list").stdout
    assert row(listed, "alice@x")[7] == "yes"
    assert row(listed, "")[1:3] + row(listed, "")[7:8] == [mallory.id, "Mallory", "no"]
    assert {u["id"]: (u["email"], u["email_verified"]) for u in
            ctl_json(bare_server, "user", "list")["data"]} == {alice: ("alice@x", True),
                                                               mallory.id: (None, False)}
    assert ctl_json(bare_server, "user", "role", "alice@x", "viewer")["id"] == alice
    for who in (alice, mallory.id):
        bare_server.ctl("user", "remove", who)


@pytest.mark.parametrize("role", ["boss", "team-admin", "team-admin:", "viewer:research", ""])
def test_an_unknown_role_is_a_usage_error_before_any_call(bare_server: LlmgwServer,
                                                          role: str) -> None:
    # The user need not exist: ctl refuses the role before it asks the server.
    proc = bare_server.ctl("user", "role", "nobody@x", role, check=False)
    assert proc.returncode == 2, proc.stderr
    said = flat(proc.stderr)
    assert "ROLE" in said and "admin, operator, viewer, team-admin:TEAM or none" in said
    assert "Traceback" not in proc.stderr and "404" not in said


def test_a_user_key_is_told_it_may_not(bare_server: LlmgwServer, store: Store) -> None:
    dave = signed_in(store, "dave", "viewer", sessions=1)
    key = ctl_json(bare_server, "key", "create", "someone")["key"]
    try:
        for args in (["list"], ["show", "dave@x"], ["role", "dave@x", "admin"],
                     ["signout", "dave@x"], ["remove", "dave@x"]):
            proc = bare_server.ctl("--key", key, "user", *args, check=False)
            assert proc.returncode == 1, args
            said = flat(proc.stderr)
            assert said.startswith("error: 403:") and "Traceback" not in proc.stderr, (args, said)
        # Nothing changed.
        user = store.users.get(dave)
        assert (str(user.grant), user.role_source) == ("viewer", "provider")
        assert len(store.sessions.list(dave, live_at=datetime.now(UTC))) == 1
    finally:
        bare_server.ctl("key", "revoke", "someone")
        bare_server.ctl("user", "remove", dave)
