"""ctl's global options live on each invocation's context: two invocations in one process, or a
group driven with its own context object, never see each other's options."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from llmgw.cli import ctl, ctl_models
from llmgw.cli.context import CtlContext
from tests.conftest import DEMO
from tests.e2e.server_process import LlmgwServer


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
