"""The store on a real PostgreSQL server: migrations, `server init`, startup failures, races."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, select, text
from sqlalchemy.engine import make_url

from llmgw.core.guard import Direction, JudgeSpec, Outcome, Policy, VerdictRecord
from llmgw.core.protocol.models import JobState, ServeJob, ServeRequest
from llmgw.core.settings import ServerSettings, dump
from llmgw.core.types import ApiKey, KeyScope, Limits, LocalSource, Model, Node, Profile, UsageRow
from llmgw.store.db import redact, schema_exists
from llmgw.store.schema import api_keys, meta, metadata
from llmgw.store.store import Store
from tests.support.isolation import clean_env
from tests.support.pg import free_port, fresh_database

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def model(name: str) -> Model:
    return Model(name=name, source=LocalSource(path="/m.gguf"), profiles=[Profile(name="cpu")])


def alembic_config() -> Config:
    cfg = Config(str(resources.files("llmgw.store") / "alembic.ini"))
    cfg.set_main_option("script_location", str(resources.files("llmgw.store") / "migrations"))
    return cfg


@pytest.fixture
def pg_url(postgres_url: str) -> str:
    """A new empty database on the session's server."""
    return fresh_database(postgres_url)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    s = Store.open(pg_url)
    yield s
    s.close()


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -m llmgw.cli …`, with a wide terminal so messages are not wrapped."""
    env = {**clean_env(), "COLUMNS": "1000", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "llmgw.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def counters(url: str) -> dict[str, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {k: v for k, v in conn.execute(select(meta.c.key, meta.c.value)).all()}
    finally:
        engine.dispose()


def test_migrations_create_the_schema_once(pg_url: str) -> None:
    assert not schema_exists(pg_url)
    Store.open(pg_url).close()
    assert schema_exists(pg_url)
    first = counters(pg_url)
    assert first == {"revision": 0, "guard_enabled": 1, "log_prompts": 0}

    Store.open(pg_url).close()  # a second upgrade is a no-op, not an error

    assert counters(pg_url) == first  # the data migrations did not run again
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [head]
    finally:
        engine.dispose()


def test_migrations_make_exactly_the_schema_in_schema_py(pg_url: str) -> None:
    Store.open(pg_url).close()
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
            columns = {t: {c["name"]: c for c in inspect(conn).get_columns(t)}
                       for t in ("api_keys", "serve_jobs", "models", "usage")}
    finally:
        engine.dispose()
    assert diff == []
    # The PostgreSQL types behind the portable ones.
    assert str(columns["models"]["spec"]["type"]) == "JSON"
    assert str(columns["models"]["created_at"]["type"]) == "TIMESTAMP"
    assert columns["models"]["created_at"]["type"].timezone is True
    assert str(columns["serve_jobs"]["bytes_total"]["type"]) == "BIGINT"
    assert str(columns["usage"]["prompt_tokens"]["type"]) == "BIGINT"
    # 0004 added columns to a table with rows: their server defaults must be valid here too.
    assert "'{}'" in columns["api_keys"]["limits"]["default"]
    assert columns["api_keys"]["note"]["default"].startswith("''")


def test_0004_fills_the_new_key_columns_of_existing_rows(pg_url: str) -> None:
    """A key written before 0004 gets `{}` limits and an empty note from the server defaults."""
    engine = create_engine(pg_url)
    try:
        cfg = alembic_config()
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0003")
            conn.execute(text(
                "INSERT INTO api_keys (id, name, prefix, last4, hash, scope, models, revoked, by,"
                " created_at) VALUES ('k1', 'old', 'sk-llmgw-ab', 'wxyz', 'h1', 'user', '[]', false,"
                " 'op', :now)"), {"now": NOW})
    finally:
        engine.dispose()
    store = Store.open(pg_url)
    try:
        key = store.keys.get("k1")
    finally:
        store.close()
    assert key.limits == Limits() and key.note == "" and key.minted_by is None
    assert key.created_at == NOW


def test_every_repository_round_trips(pg_store: Store) -> None:
    """JSON, BigInteger, booleans and timezone-aware times come back as they went in."""
    s = pg_store
    s.catalog.add(model("m1"), "op", NOW)
    assert s.catalog.get("m1").created_at == NOW

    s.nodes.upsert(Node(id="n1", labels={"zone": "a"}, cores=8, memory_gb=31.5, gpus={"a100": 2}), NOW)
    [node] = s.nodes.list()
    assert node.labels == {"zone": "a"} and node.gpus == {"a100": 2} and node.cordoned is False
    assert node.heartbeat_at == NOW

    key = ApiKey(id="k1", name="ci", prefix="sk-llmgw-ab", last4="wxyz", hash="h" * 64, scope=KeyScope.USER,
                 models=["m1"], expires_at=NOW + timedelta(days=30), by="op", created_at=NOW,
                 limits=Limits(rpm=60, tokens_per_day=10**10), note="for CI")
    s.keys.create(key)
    assert s.keys.get("k1") == key
    s.keys.set_default_limits(Limits(tpm=1000))
    assert s.keys.default_limits() == Limits(tpm=1000)

    big = 70 * 2**30  # a 70 GiB download does not fit a 32-bit integer
    job = ServeJob(id="j1", request=ServeRequest(name="m2", source=LocalSource(path="/m2.gguf")),
                   bytes_total=big)
    s.jobs.create(job, NOW)
    s.jobs.update("j1", NOW, state=JobState.FETCHING, bytes_done=big - 1, rate_bps=1.5e9)
    got = s.jobs.get("j1")
    assert (got.state, got.bytes_done, got.bytes_total, got.request) == (
        JobState.FETCHING, big - 1, big, job.request)

    s.guard.set_policy(Policy(name="p", judges=["j"], block_categories=["S1"]), "op", NOW)
    s.guard.set_policy(Policy(name="p", judges=["j", "k"]), "op", NOW)  # replaces
    [policy] = s.guard.policies()
    assert policy.judges == ["j", "k"] and policy.updated_at == NOW
    s.guard.set_switch("log_prompts", True)
    assert s.guard.switches() == {"guard_enabled": True, "log_prompts": True}
    s.guard.enable_judge(JudgeSpec(name="custom", repo="o/r", file="f.gguf", size_gb=1.0), "op", NOW)
    assert [j.name for j in s.guard.enabled_judges()] == ["custom"]
    records = [VerdictRecord(at=NOW + timedelta(seconds=i), policy="p", judge="j", direction=Direction.INPUT,
                             outcome=Outcome.UNSAFE, categories=["S1"], latency_ms=12.5, text="hi")
               for i in range(3)]
    s.guard.add_verdicts(records)
    assert s.guard.verdicts(since=NOW + timedelta(seconds=1)) == records[:0:-1]

    row = {"key_id": "k1", "model": "m1", "day": "2026-01-01"}
    s.usage.add_usage([UsageRow(**row, requests=1, prompt_tokens=3 * 10**9)])
    s.usage.add_usage([UsageRow(**row, requests=1, completion_tokens=10**9)])
    assert s.usage.usage() == [UsageRow(**row, requests=2, prompt_tokens=3 * 10**9,
                                        completion_tokens=10**9)]
    assert s.usage.tokens_since(["k1"], "2026-01-01") == {"k1": 4 * 10**9}
    minute = 29_500_000
    s.usage.add_rates({("k1", minute): (1, 10)})
    s.usage.add_rates({("k1", minute): (1, 5)})
    assert s.usage.rates([minute]) == {("k1", minute): (2, 15)}
    s.usage.prune_rates(minute + 1)
    assert s.usage.rates([minute]) == {}


def test_server_init_creates_the_schema_and_an_admin_key(pg_url: str, tmp_path: Path) -> None:
    password = make_url(pg_url).password
    assert password
    out = cli("server", "init", "--data-dir", str(tmp_path / "d"), "--database", pg_url, "--no-guard")
    assert out.returncode == 0, out.stderr
    printed = out.stdout + out.stderr
    assert f"created database {redact(pg_url)}" in printed
    assert password not in printed  # the URL is shown, its password is not
    admin_key = next(w for w in printed.split() if w.startswith("sk-llmgw-") and "…" not in w)

    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(api_keys)).all()
            tables = set(inspect(conn).get_table_names())
    finally:
        engine.dispose()
    assert set(metadata.tables) <= tables
    assert [(r.scope, r.name, r.revoked) for r in rows] == [("admin", "admin", False)]
    assert admin_key.startswith(rows[0].prefix) and admin_key.endswith(rows[0].last4)
    assert rows[0].hash not in printed and admin_key != rows[0].hash  # stored hashed

    again = cli("server", "init", "--data-dir", str(tmp_path / "d"), "--database", pg_url, "--no-guard")
    assert again.returncode == 0, again.stderr
    assert f"database {redact(pg_url)}" in again.stdout and "created" not in again.stdout
    assert password not in again.stdout + again.stderr


@pytest.mark.parametrize("fault", ["wrong password", "nothing listening"])
def test_a_failed_migration_stops_server_run_with_one_clear_line(
    fault: str, postgres_url: str, tmp_path: Path
) -> None:
    url = make_url(fresh_database(postgres_url))
    if fault == "wrong password":
        bad, reason = url.set(password="not-the-password"), "password authentication failed"
    else:
        bad, reason = url.set(port=free_port()), "refused"
    bad_url = bad.render_as_string(hide_password=False)
    settings = ServerSettings(database=bad_url, key_secret="00" * 32, port=0)
    (tmp_path / "config.toml").write_text(dump(settings))

    out = cli("server", "run", "--data-dir", str(tmp_path), "--log-format", "text")

    printed = out.stdout + out.stderr
    lines = [line for line in printed.splitlines() if line.strip()]
    assert out.returncode == 1, printed
    assert "Traceback" not in printed
    assert "not-the-password" not in printed and str(url.password) not in printed
    assert len(lines) == 1, f"expected one line, got:\n{printed}"
    assert lines[0].startswith("error: ") and "database" in lines[0] and reason in lines[0], lines[0]


def add_at_once(barrier: threading.Barrier, store: Store, name: str, errors: list[BaseException]) -> None:
    try:
        barrier.wait(timeout=10)
        store.catalog.add(model(name), name, NOW)
    except BaseException as exc:  # reported by the test's own thread
        errors.append(exc)


def test_concurrent_writers_each_bump_the_revision_once(pg_url: str) -> None:
    """Two servers adding different models at the same moment: both land, no bump is lost."""
    stores = [Store.open(pg_url), Store.open(pg_url)]
    try:
        for round_ in range(5):
            before = stores[0].revision()
            barrier = threading.Barrier(2)
            errors: list[BaseException] = []
            names = [f"a{round_}", f"b{round_}"]
            threads = [threading.Thread(target=add_at_once, args=(barrier, s, n, errors))
                       for s, n in zip(stores, names, strict=True)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            assert errors == []
            assert stores[1].revision() == before + 2
            assert {m.name for m in stores[0].catalog.list()} >= set(names)
    finally:
        for s in stores:
            s.close()


def test_times_come_back_in_utc_whatever_the_server_time_zone(pg_url: str) -> None:
    """PostgreSQL hands `timestamptz` back in the session's time zone (the server's by default,
    often local time); llmgw's times are UTC on every backend, as they are on SQLite."""
    engine = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"ALTER DATABASE {make_url(pg_url).database} SET timezone TO 'Asia/Kolkata'"))
    finally:
        engine.dispose()
    store = Store.open(pg_url)
    try:
        store.catalog.add(model("m1"), "op", NOW)
        store.guard.add_verdicts([VerdictRecord(at=NOW, policy="p", judge="j", direction=Direction.INPUT,
                                                outcome=Outcome.SAFE, latency_ms=1.0)])
        entry, [verdict] = store.catalog.get("m1"), store.guard.verdicts()
    finally:
        store.close()
    assert entry.created_at == NOW and verdict.at == NOW  # the same instant either way
    shown = {"created_at": entry.model_dump(mode="json")["created_at"],
             "at": verdict.model_dump(mode="json")["at"]}
    assert shown == {"created_at": "2026-01-01T00:00:00Z", "at": "2026-01-01T00:00:00Z"}
