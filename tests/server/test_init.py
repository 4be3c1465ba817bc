"""`server init`: what it creates, and that secrets are stored safely."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llmgw.core.errors import ConfigError
from llmgw.core.settings import load
from llmgw.server import init as init_module
from llmgw.server.app import Server
from llmgw.server.init import init
from llmgw.server.run import serve
from llmgw.store.store import Store
from tests.factories import NOW, judge_machine, node


def test_init_creates_config_database_and_one_admin_key(tmp_path: Path) -> None:
    result = init(tmp_path / "data", port=9999)
    assert result.admin_key and result.admin_key.startswith("sk-llmgw-")
    assert any("database" in line for line in result.created)
    config = tmp_path / "data" / "config.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert load(tmp_path / "data").port == 9999


def test_the_key_is_stored_only_as_a_hash(tmp_path: Path) -> None:
    result = init(tmp_path / "data")
    assert result.admin_key
    raw = (tmp_path / "data" / "llmgw.db").read_bytes()
    assert result.admin_key.encode() not in raw
    settings = load(tmp_path / "data")
    store = Store.open(settings.database_url(tmp_path / "data"))
    [key] = store.keys.list()
    store.close()
    assert key.prefix == result.admin_key[:13] and key.last4 == result.admin_key[-4:]


def test_second_init_reports_what_exists_and_shows_no_key(tmp_path: Path) -> None:
    init(tmp_path / "data")
    again = init(tmp_path / "data")
    assert again.admin_key is None and again.created == []
    assert any(line.startswith("admin key sk-llmgw-") for line in again.existed)


def test_init_asks_for_its_judge_on_the_judge_machine_once(tmp_path: Path) -> None:
    result = init(tmp_path / "data", judge_node={"role": "judge"})
    assert "judge machine: the node labelled role=judge" in result.created
    store = Store.open(load(tmp_path / "data").database_url(tmp_path / "data"))
    try:
        [job] = store.jobs.list()
        assert job.model == "qwen3guard-0.6b" and job.state.value == "queued"
        # If the keeper (or an operator) adds the judge first, init's entry gives way.
        assert job.request.if_absent and job.request.guard
        assert [p.node_selector for p in job.request.profiles] == [{"role": "judge"}]
        assert store.install.judge_node_selector() == {"role": "judge"}
    finally:
        store.close()
    again = init(tmp_path / "data", judge_node={"role": "judge"})
    assert "serve job for judge qwen3guard-0.6b" in again.existed
    assert again.created == []


def test_the_demo_judge_goes_to_the_judge_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def small_demo_file(models_dir: Path) -> Path:
        models_dir.mkdir(parents=True, exist_ok=True)
        (models_dir / "demo.gguf").write_bytes(b"GGUF")
        return models_dir / "demo.gguf"

    # The demo GGUF is 240 MB to assemble; its placement is what this test is about.
    monkeypatch.setattr(init_module, "demo_model_path", small_demo_file)
    init(tmp_path / "data", demo=True, judge_node={"role": "judge"}, embedded_node=False)
    assert load(tmp_path / "data").embedded_node is False
    store = Store.open(load(tmp_path / "data").database_url(tmp_path / "data"))
    try:
        models = {m.name: m for m in store.catalog.list()}
    finally:
        store.close()
    assert models["demo-judge"].profiles[0].node_selector == {"role": "judge"}
    assert models["gemma3-270m"].profiles[0].node_selector == {}


def test_a_second_install_on_the_same_database_is_refused(tmp_path: Path) -> None:
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    init(tmp_path / "first", database=shared)
    # A new config would get a key secret of its own and no key of the install would work.
    with pytest.raises(ConfigError, match="already holds an llmgw install: to add a server to "
                                          "it, copy config.toml from a server of this install"):
        init(tmp_path / "second", database=shared)
    assert not (tmp_path / "second" / "config.toml").exists()


async def test_a_server_whose_key_secret_is_not_the_installs_does_not_start(tmp_path: Path) -> None:
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    init(tmp_path / "first", database=shared)
    (tmp_path / "stray").mkdir()
    config = (tmp_path / "first" / "config.toml").read_text()
    stray = re.sub(r'key_secret = "[0-9a-f]+"', f'key_secret = "{"ab" * 32}"', config)
    (tmp_path / "stray" / "config.toml").write_text(stray)
    with pytest.raises(ConfigError, match="does not belong to the install in database"):
        await serve(tmp_path / "stray", port=0)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which files are created world-readable unless asked otherwise."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.usefixtures("umask_022")
async def test_the_database_and_the_files_sqlite_adds_are_private_to_the_owner(
    tmp_path: Path,
) -> None:
    result = init(tmp_path / "data", guard=False)
    db = tmp_path / "data" / "llmgw.db"
    assert mode(db) == 0o600  # it holds the engine key and the key hashes
    settings = load(tmp_path / "data")
    store = Store.open(settings.database_url(tmp_path / "data"))
    app = Server(tmp_path / "data", settings, store).build_app()
    async with TestClient(TestServer(app)) as client:
        # A write by the running server: SQLite has its -wal and -shm files open now.
        model = {"name": "r", "source": {"kind": "remote", "base_url": "http://127.0.0.1:9/v1"}}
        resp = await client.post("/admin/v1/models", json=model,
                                 headers={"Authorization": f"Bearer {result.admin_key}"})
        assert resp.status == 201
        files = [db, db.with_name("llmgw.db-wal"), db.with_name("llmgw.db-shm")]
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}


@pytest.mark.usefixtures("umask_022")
def test_a_database_left_readable_by_an_earlier_version_is_made_private(tmp_path: Path) -> None:
    init(tmp_path / "data", guard=False)
    db = tmp_path / "data" / "llmgw.db"
    for f in (db, db.with_name("llmgw.db-wal")):
        f.touch()
        f.chmod(0o644)
    store = Store.open(load(tmp_path / "data").database_url(tmp_path / "data"))
    try:
        assert mode(db) == 0o600 and mode(db.with_name("llmgw.db-wal")) == 0o600
    finally:
        store.close()


def _judge_job_profile(data_dir: Path) -> tuple[int, int]:
    """Cores per replica and replicas of the judge init asked for."""
    store = Store.open(load(data_dir).database_url(data_dir))
    try:
        [job] = store.jobs.list()
    finally:
        store.close()
    return job.request.profiles[0].cpu_cores, job.request.scaling.min


@pytest.mark.parametrize(("cores", "expected"), [(2, (1, 2)), (3, (1, 2)), (16, (2, 2))])
def test_init_sizes_its_judge_for_this_machine_like_the_keeper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int, expected: tuple[int, int]
) -> None:
    # The judge lands on the embedded node, this machine: on 2 cores both replicas must place.
    monkeypatch.setattr(init_module.hardware, "probe", lambda node_id: node(node_id, cores=cores))
    init(tmp_path / "data")
    per_replica, replicas = _judge_job_profile(tmp_path / "data")
    assert (per_replica, replicas) == expected
    assert per_replica * replicas <= cores


def test_init_sizes_its_judge_for_the_judge_machine_it_knows(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = Store.open(f"sqlite:///{data / 'llmgw.db'}")
    store.nodes.upsert(judge_machine(cores=2), NOW)
    store.nodes.upsert(node("big", cores=64), NOW)  # not the judge machine
    store.close()

    init(data, judge_node={"role": "judge"})

    assert _judge_job_profile(data) == (1, 2)
