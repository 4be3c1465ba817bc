"""End to end: engines never outlive their server; placement explains itself."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import openai
from alembic import command
from sqlalchemy import create_engine, text

from llmgw.core.settings import ServerSettings, dump, load
from llmgw.store.db import schema_config
from tests.conftest import DEMO
from tests.support.cluster import hold
from tests.support.server_process import LlmgwServer, pid_alive, run_cli, wait_for


def test_kill_9_server_takes_its_engines_along(tmp_path: Path) -> None:
    server = LlmgwServer.init(tmp_path / "data", "--demo")
    server.start()
    try:
        engine_pid = server.wait_ready(DEMO)["pid"]
        assert pid_alive(engine_pid)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(timeout=10)
        wait_for("the engine to die with its server", lambda: not pid_alive(engine_pid), 10)
    finally:
        server.stop()


def test_a_server_paused_past_the_node_timeout_keeps_its_engines(tmp_path: Path) -> None:
    # A suspended laptop: the server (its keeper and its node's heartbeats) stops for longer
    # than the node timeout while its engine keeps running; waking must not restart it.
    server = LlmgwServer.init(tmp_path / "data", "--demo")
    settings = load(server.data_dir)
    control = settings.control.model_copy(update={"node_timeout_s": 3.0, "keeper_interval_s": 0.5})
    (server.data_dir / "config.toml").write_text(
        dump(ServerSettings.model_validate({**settings.model_dump(), "control": control})))
    server.start()
    try:
        before = server.wait_ready(DEMO)
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGSTOP)
        time.sleep(5)  # the pause itself is what is tested: there is no event to await
        os.kill(server.proc.pid, signal.SIGCONT)

        def same_replica() -> bool:
            return [(r["id"], r["state"], r["pid"]) for r in server.replicas(DEMO)] == \
                [(before["id"], "ready", before["pid"])]

        hold("the replica to stay as it was", same_replica, 5.0)
        assert "is lost" not in server.log()
    finally:
        if server.proc is not None and server.proc.poll() is None:
            os.kill(server.proc.pid, signal.SIGCONT)  # a stopped process would not stop
        server.stop()


def test_clean_stop_stops_engines(tmp_path: Path) -> None:
    server = LlmgwServer.init(tmp_path / "data", "--demo")
    server.start()
    engine_pid = server.wait_ready(DEMO)["pid"]
    server.stop()
    assert server.proc is not None and server.proc.returncode == 0
    assert not pid_alive(engine_pid)


def test_restart_serves_again_without_losing_the_catalog(tmp_path: Path) -> None:
    server = LlmgwServer.init(tmp_path / "data", "--demo")
    server.start()
    try:
        server.wait_ready(DEMO)
        server.ctl("model", "scale", DEMO, "--min", "1", "--max", "2")
    finally:
        server.stop()
    server.start()
    try:
        ready = server.wait_ready(DEMO)
        assert ready["endpoint"]
        models = json.loads(server.ctl("--json", "model", "list").stdout)["data"]
        model = next(m for m in models if m["name"] == DEMO)
        assert model["scaling"] == {"min": 1, "max": 2, "idle_s": None}
        assert model["by"].startswith("admin (sk-llmgw-")
    finally:
        server.stop()


def test_a_single_machine_install_serves_across_the_upgrade_to_engine_keys_per_node(
        tmp_path: Path) -> None:
    server = LlmgwServer.init(tmp_path / "data", "--demo")
    server.start()
    try:
        before = server.wait_ready(DEMO)
    finally:
        server.stop()
    # The database as the version before engine keys per node left it, its replica recorded:
    # the later migrations taken back (each is run again at the start below).
    engine = create_engine(load(tmp_path / "data").database_url(tmp_path / "data"))
    try:
        with engine.begin() as conn:
            cfg = schema_config()
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0018")
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0018"
    finally:
        engine.dispose()
    server.start()
    try:
        after = server.wait_ready(DEMO)
        assert after["id"] != before["id"]  # replaced once, started with the node's own key
        server.wait_ready("demo-judge")  # the demo policy judges the request below
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.admin_key,
                               max_retries=0, timeout=60)
        reply = client.chat.completions.create(
            model=DEMO, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
        assert reply.usage is not None and reply.usage.completion_tokens > 0
    finally:
        server.stop()


def test_init_twice_changes_nothing(tmp_path: Path) -> None:
    server = LlmgwServer.init(tmp_path / "data")
    config = (tmp_path / "data" / "config.toml").read_text()
    again = run_cli("server", "init", env=server.env).stdout
    assert "nothing to do" in again
    assert "shown once" not in again and server.admin_key not in again  # no new key
    assert (tmp_path / "data" / "config.toml").read_text() == config
