"""`llmgw ctl team …`, `ctl key create --team` and `ctl usage --team` against a running server."""

from __future__ import annotations

import json
from typing import Any

from tests.cli.test_ctl_guard import flat, row
from tests.support.server_process import LlmgwServer


def ctl_json(server: LlmgwServer, *args: str) -> Any:
    return json.loads(server.ctl("--json", *args).stdout)


def test_team_create_list_show_and_remove(bare_server: LlmgwServer) -> None:
    out = bare_server.ctl("team", "create", "red", "--models", "down-*", "--rpm", "100",
                          "--tokens-per-day", "50000", "--tool-concurrent", "4",
                          "--note", "research").stdout
    assert row(out, "red")[1:3] == ["down-*", "rpm 100, tokens_per_day 50000, tool_concurrent 4"]
    team = ctl_json(bare_server, "team", "show", "red")
    assert team["limits"]["tokens_per_day"] == 50000 and team["keys"] == 0
    assert team["limits"]["tool_concurrent"] == 4
    weighed = bare_server.ctl("team", "create", "red", "--weight", "2.5", "--replace").stdout
    assert row(weighed, "red")[3] == "2.5"  # its share of a busy model
    assert ctl_json(bare_server, "team", "show", "red")["weight"] == 2.5
    changed = ctl_json(bare_server, "team", "create", "red", "--rpm", "10", "--replace")
    assert changed["limits"]["rpm"] == 10 and changed["models"] == [] and changed["weight"] == 1
    assert [t["name"] for t in ctl_json(bare_server, "team", "list")["data"]] == ["red"]

    made = ctl_json(bare_server, "key", "create", "red-admin", "--team", "red", "--team-admin",
                    "--tool-calls-per-minute", "30")
    assert made["team"] == "red" and made["team_admin"] is True
    assert made["limits"]["tool_calls_per_minute"] == 30
    assert row(bare_server.ctl("key", "list").stdout, made["id"])[4] == "red (admin)"
    proc = bare_server.ctl("team", "remove", "red", check=False)
    assert proc.returncode == 1 and "still has keys" in flat(proc.stderr)

    # The team admin mints for its team only, with ctl pointed at its own key.
    minted = json.loads(bare_server.ctl("--key", made["key"], "--json", "key", "create",
                                        "member").stdout)
    assert minted["team"] == "red"
    proc = bare_server.ctl("--key", made["key"], "key", "create", "x", "--team", "blue",
                           check=False)
    assert proc.returncode == 1 and "own team only" in flat(proc.stderr)
    assert ctl_json(bare_server, "usage", "--team", "red") == {"data": []}

    for key in (made, minted):
        bare_server.ctl("key", "revoke", key["id"])
    assert "removed team red" in bare_server.ctl("team", "remove", "red").stdout


def test_team_errors_are_one_clear_line(bare_server: LlmgwServer) -> None:
    for args, said in [
        (["team", "create", "bad name"], "NAME"),
        (["team", "create", "light", "--weight", "0"], "--weight"),
        (["team", "show", "ghost"], "404"),
        (["key", "create", "x", "--team", "ghost"], "team 'ghost' does not exist"),
        (["key", "create", "x", "--team-admin"], "a team admin needs a team"),
    ]:
        proc = bare_server.ctl(*args, check=False)
        assert proc.returncode == 1, args
        assert said in flat(proc.stderr) and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_default_limits_take_the_tool_limits(bare_server: LlmgwServer) -> None:
    try:
        limits = ctl_json(bare_server, "limits", "default", "--tool-calls-per-minute", "120",
                          "--tool-concurrent", "8")
        assert limits["tool_calls_per_minute"] == 120 and limits["tool_concurrent"] == 8
    finally:
        bare_server.ctl("limits", "default", "--clear")
