"""Data migrations: what an install stored before an upgrade keeps working after it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from llmgw.core.types import KeyScope
from llmgw.store.store import Store
from tests.support.pg import fresh_database

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return fresh_database(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{tmp_path / 'llmgw.db'}"


def upgrade_to(url: str, revision: str, rows: list[dict[str, object]],
               teams: tuple[tuple[str, datetime], ...] = ()) -> None:
    """Migrate an empty database to `revision` and write `rows` to api_keys (and `teams`, each
    a name and when it was made), as that version did."""
    cfg = Config(str(resources.files("llmgw.store") / "alembic.ini"))
    cfg.set_main_option("script_location", str(resources.files("llmgw.store") / "migrations"))
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
            for name, made in teams:
                conn.execute(text("INSERT INTO teams (name, spec, by, created_at, updated_at) "
                                  "VALUES (:name, '{}', 'admin', :made, :made)"),
                             {"name": name, "made": made})
            for row in rows:
                team = {"team": row.pop("team")} if "team" in row else {}
                conn.execute(text(
                    "INSERT INTO api_keys (id, name, prefix, last4, hash, scope, models, revoked,"
                    " by, created_at, limits, note, minted_by" + (", team" if team else "") +
                    ") VALUES (:id, :name, :prefix, :last4, :id, 'user', '[]', :revoked, :by,"
                    " :now, '{}', '', :minted_by" + (", :team" if team else "") + ")"),
                    {"now": NOW, **row, **team})
    finally:
        engine.dispose()


def key_row(kid: str, *, by: str = "admin (sk-llmgw-adm…0000)", revoked: bool = False,
            minted_by: str | None = None) -> dict[str, object]:
    return {"id": kid, "name": kid, "prefix": f"sk-llmgw-{kid}", "last4": kid[-4:].rjust(4, "x"),
            "revoked": revoked, "by": by, "minted_by": minted_by}


def test_keys_minted_by_a_key_rotated_before_the_upgrade_keep_working(empty_url: str) -> None:
    # alice was rotated twice (alice → alice2 → alice3) after minting bob; carol was minted by
    # alice2 before its rotation. Both must end up minted by the key that is live now.
    upgrade_to(empty_url, "0008", [
        key_row("alice", revoked=True),
        key_row("alice2", revoked=True, by="admin (sk-llmgw-adm…0000), rotating sk-llmgw-alice…lice"),
        key_row("alice3", by="admin (sk-llmgw-adm…0000), rotating sk-llmgw-alice2…ice2"),
        key_row("bob", minted_by="alice", by="alice (sk-llmgw-alice…lice)"),
        key_row("carol", minted_by="alice2", by="alice (sk-llmgw-alice2…ice2)"),
        key_row("dave", minted_by="gone", by="someone"),  # no rotation recorded: left alone
    ])
    store = Store.open(empty_url)
    try:
        keys = {k.id: k for k in store.keys.list()}
    finally:
        store.close()
    assert keys["bob"].minted_by == "alice3" and keys["carol"].minted_by == "alice3"
    assert keys["dave"].minted_by == "gone"
    assert keys["bob"].scope == KeyScope.USER and not keys["bob"].revoked


def test_each_team_gets_an_id_and_only_keys_made_since_it_was_made_are_its(
        empty_url: str) -> None:
    # "red" was made an hour before NOW (when every key here was made); "blue" was made after
    # them, so its keys belong to an earlier blue, removed since: they belong to no team now.
    upgrade_to(empty_url, "0016", [
        {**key_row("r1"), "team": "red"},
        {**key_row("b1", revoked=True), "team": "blue"},
        {**key_row("loner")},
    ], teams=(("red", NOW - timedelta(hours=1)), ("blue", NOW + timedelta(hours=1))))
    store = Store.open(empty_url)
    try:
        teams = {t.name: t for t in store.teams.list()}
        keys = {k.id: k for k in store.keys.list()}
    finally:
        store.close()
    assert teams["red"].id.startswith("team-") and teams["red"].id != teams["blue"].id
    assert keys["r1"].team == "red" and keys["r1"].team_id == teams["red"].id
    assert keys["b1"].team == "blue" and keys["b1"].team_id is None
    assert keys["loner"].team_id is None


def test_replicas_running_with_the_shared_engine_key_are_replaced(empty_url: str) -> None:
    # Their engines hold the key every node shared; servers now call each with its node's own.
    upgrade_to(empty_url, "0018", [])
    engine = create_engine(empty_url)
    try:
        with engine.begin() as conn:
            for rid, node_id, state in (("r-ready", "gpu-1", "ready"), ("r-failed", "gpu-2", "failed"),
                                        ("r-pending", None, "pending")):
                conn.execute(text(
                    "INSERT INTO replicas (id, model, node_id, profile, state, restarts, cpu_cores,"
                    " memory_gb, gpus, updated_at) VALUES (:id, 'm', :node, 'cpu', :state, 0, 1,"
                    " 1.0, 0, :now)"), {"id": rid, "node": node_id, "state": state, "now": NOW})
    finally:
        engine.dispose()
    store = Store.open(empty_url)
    try:
        states = {r.id: r.state.value for r in store.replicas.list()}
    finally:
        store.close()
    assert states == {"r-ready": "stopping", "r-failed": "stopping", "r-pending": "pending"}
