"""ctl's global options live on each invocation's context: two invocations in one process, or a
group driven with its own context object, never see each other's options. Request bodies are
protocol models: a value one refuses is a clear error naming the option, before anything is sent."""

from __future__ import annotations

import json

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from llmgw.cli import ctl, ctl_models
from llmgw.cli.context import CtlContext, body, parse, query, refusal
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.keys import UsageQuery
from llmgw.core.protocol.models import ReplicaQuery, ScaleRequest
from llmgw.core.protocol.nodes import NodeRemoveQuery
from llmgw.core.types import Limits, Profile, Replica, Scaling
from tests.conftest import DEMO
from tests.support.server_process import LlmgwServer


def env_of(server: LlmgwServer) -> dict[str, str | None]:
    return {"LLMGW_URL": server.url, "LLMGW_ADMIN_KEY": server.admin_key,
            "LLMGW_CTL_CONFIG": server.env["LLMGW_CTL_CONFIG"], "COLUMNS": "250"}


def test_options_of_one_invocation_do_not_carry_into_the_next(demo_server: LlmgwServer) -> None:
    runner = CliRunner()
    env = env_of(demo_server)
    as_json = runner.invoke(ctl.app, ["--json", "model", "list"], env=env)
    assert as_json.exit_code == 0, as_json.output
    assert DEMO in [m["name"] for m in json.loads(as_json.stdout)["data"]]
    as_table = runner.invoke(ctl.app, ["model", "list"], env=env)
    assert as_table.exit_code == 0 and "┃ name" in as_table.stdout and not as_table.stdout.startswith("{")
    refused = runner.invoke(ctl.app, ["--key", "sk-llmgw-nope", "model", "list"], env=env)
    assert refused.exit_code == 1 and "401" in refused.stderr
    again = runner.invoke(ctl.app, ["model", "list"], env=env)
    assert again.exit_code == 0 and DEMO in again.stdout


def test_a_group_runs_with_the_context_object_it_is_given(demo_server: LlmgwServer) -> None:
    runner = CliRunner()
    env = {**env_of(demo_server), "LLMGW_URL": "http://127.0.0.1:9", "LLMGW_ADMIN_KEY": None}
    ok = runner.invoke(ctl_models.model_app, ["list"], env=env,
                       obj=CtlContext(url=demo_server.url, key=demo_server.admin_key, json=True))
    assert ok.exit_code == 0, ok.output
    assert DEMO in [m["name"] for m in json.loads(ok.stdout)["data"]]
    wrong = runner.invoke(ctl_models.model_app, ["list"], env=env,
                          obj=CtlContext(url=demo_server.url, key="sk-llmgw-nope"))
    assert wrong.exit_code == 1 and "401" in wrong.stderr
    nowhere = runner.invoke(ctl_models.model_app, ["list"], env=env)
    assert nowhere.exit_code == 1 and "no admin key" in nowhere.stderr


def test_the_key_never_shows_in_the_context_repr() -> None:
    assert "s3cret" not in repr(CtlContext(url="http://h", key="sk-llmgw-s3cret"))


@pytest.mark.parametrize(("args", "option", "why"), [
    (["key", "create", "k", "--rpm", "0"], "--rpm", "greater than or equal to 1"),
    (["key", "create", "k", "--expires-in-days", "-1"], "--expires-in-days", "greater than 0"),
    (["model", "add", "bad!name", "--path", "/m/x.gguf"], "NAME", "name must be"),
    (["model", "add", "m", "--path", "/m/x.gguf", "--cores", "5000"], "--cores", "less than or equal"),
    (["model", "add", "m", "--base-url", "ftp://host/v1"], "--base-url", "http:// or https://"),
    (["model", "scale", "m", "--min", "100"], "--min", "less than or equal to 64"),
    (["model", "serve", "--repo", "a/b", "--file", "x.gguf", "--memory-gb", "0"], "--memory-gb",
     "greater than 0"),
])
def test_a_value_the_request_model_refuses_is_one_line_naming_the_option(
    args: list[str], option: str, why: str,
) -> None:
    # Nothing listens on port 9: an error about reaching it would mean the body was sent.
    result = CliRunner().invoke(ctl.app, ["--url", "http://127.0.0.1:9", "--key", "sk-llmgw-x", *args],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {option}: ") and why in result.stderr
    assert "cannot reach" not in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(("args", "option", "choices"), [
    (["key", "create", "k", "--scope", "root"], "--scope", "'admin', 'user', 'node', 'metrics'"),
    (["guard", "judge", "enable", "--repo", "a/b", "--file", "x.gguf", "--format", "gpt"], "--format",
     "'qwen3guard', 'llama-guard'"),
    (["guard", "verdicts", "--outcome", "blocked"], "--outcome", "'safe', 'unsafe'"),
    (["guard", "policy", "set", "p", "--on-failure", "maybe"], "--on-failure", "'closed', 'open'"),
])
def test_an_option_taking_a_protocol_enum_lists_its_values(
    args: list[str], option: str, choices: str,
) -> None:
    result = CliRunner().invoke(ctl.app, ["--url", "http://127.0.0.1:9", "--key", "sk-llmgw-x", *args],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert f"Invalid value for '{option}'" in text and choices in text


def test_a_refusal_names_the_option_of_the_model_that_refused() -> None:
    fields = {"Profile.name": "--profile", "name": "NAME", "cpu_cores": "--cores", "Scaling": "--min/--max"}
    with pytest.raises(ValidationError) as profile:
        Profile(name=7, cpu_cores=1)  # type: ignore[arg-type]
    assert refusal(profile.value, fields) == "--profile: Input should be a valid string"
    with pytest.raises(ValidationError) as scaling:
        Scaling(min=3, max=1)
    assert refusal(scaling.value, fields) == "--min/--max: scaling.max (1) is below scaling.min (3)"
    assert refusal(scaling.value, {}) == "scaling.max (1) is below scaling.min (3)"


def test_a_body_holds_only_the_fields_ctl_set() -> None:
    assert body(ScaleRequest(min=1, max=None)) == {"min": 1, "max": None}  # idle: unchanged
    assert body(ScaleRequest(min=1, idle_s=None)) == {"min": 1, "idle_s": None}  # idle: off
    assert body(Limits(rpm=5)) == {"rpm": 5}


def test_a_query_holds_only_the_filters_given() -> None:
    assert query(ReplicaQuery()) == ""
    assert query(NodeRemoveQuery(force=True)) == "?force=true"
    assert query(UsageQuery(model="org/m:q4 x", since="2026-11-01")) == \
        "?model=org%2Fm%3Aq4+x&since=2026-11-01"


def test_an_answer_ctl_cannot_read_is_one_line_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as caught:
        parse(DataList[Replica], {"data": [{"model": "m"}]})
    assert caught.value.exit_code == 1
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: the server answered what this ctl cannot read (data.0.id: Field required)")
    assert "another version of llmgw" in err


def test_json_output_is_the_servers_answer_as_it_came(demo_server: LlmgwServer) -> None:
    runner = CliRunner()
    env = env_of(demo_server)
    for args, path in ((["guard", "status"], "/admin/v1/guard"), (["key", "show", "admin"], None),
                       (["limits", "default"], "/admin/v1/limits/default")):
        result = runner.invoke(ctl.app, ["--json", *args], env=env)
        assert result.exit_code == 0, result.output
        answer = json.loads(result.stdout)
        assert answer == demo_server.get(path or f"/admin/v1/keys/{answer['id']}")
