"""`llmgw ctl route …` against a running server: add, list, show (with a cooldown), remove, and
clear errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cli.test_ctl_guard import flat, row
from tests.support.server_process import LlmgwServer


def ctl_json(server: LlmgwServer, *args: str) -> Any:
    return json.loads(server.ctl("--json", *args).stdout)


def test_route_add_list_show_and_remove(bare_server: LlmgwServer) -> None:
    out = bare_server.ctl("route", "add", "chat", "--to", "down-1,down-2", "--strategy", "weighted",
                     "--weights", "3,1", "--fallback-on", "connect,5xx", "--retries", "1").stdout
    assert "route chat: weighted; falls back on connect, 5xx" in flat(out)
    assert "1 retry" in flat(out)
    made = ctl_json(bare_server, "route", "show", "chat")
    assert [(t["model"], t["weight"]) for t in made["targets"]] == [("down-1", 3), ("down-2", 1)]
    assert made["fallback"]["cooldown"] == {"failures": 3, "window_s": 60.0, "cooldown_s": 30.0}
    assert row(bare_server.ctl("route", "list").stdout, "chat")[1:3] == ["weighted", "down-1×3, down-2×1"]

    changed = ctl_json(bare_server, "route", "add", "chat", "--to", "down-2", "--replace")
    assert changed["strategy"] == "priority" and changed["retry"]["attempts"] == 0
    assert "removed route chat" in bare_server.ctl("route", "remove", "chat").stdout
    assert ctl_json(bare_server, "route", "list") == {"data": []}


def test_route_show_says_which_target_cools_down(bare_server: LlmgwServer) -> None:
    bare_server.ctl("route", "add", "flaky", "--to", "down-1,down-2", "--cooldown-failures", "1",
               "--cooldown", "600")
    try:
        with pytest.raises(Exception, match="502"):  # both targets are down
            bare_server.call("POST", "/v1/chat/completions",
                        {"model": "flaky", "messages": [{"role": "user", "content": "hi"}]})
        table = bare_server.ctl("route", "show", "flaky").stdout
        for target in ("down-1", "down-2"):
            cells = row(table, target)
            # None answers (each refused a connection just now), and each cools down.
            assert cells[2] == "0" and cells[5].endswith("s"), cells
        assert row(bare_server.ctl("route", "list").stdout, "flaky")[6] == "down-1,down-2"
    finally:
        bare_server.ctl("route", "remove", "flaky")


@pytest.mark.parametrize(("args", "said"), [
    (["route", "add", "x", "--to", "nowhere"], "targets not in the catalog: nowhere"),
    (["route", "add", "down-1", "--to", "down-2"], "is a catalog model's name"),
    (["route", "add", "x", "--to", "down-1,down-2", "--weights", "1"], "--weights gives 1 weights"),
    (["route", "add", "x", "--to", "down-1", "--fallback-on", "teapot"], "--fallback-on takes"),
    (["route", "add", "x", "--to", "down-1", "--retries", "99"], "--retries"),
    (["route", "show", "ghost"], "404"),
])
def test_route_errors_are_one_clear_line(bare_server: LlmgwServer, args: list[str], said: str) -> None:
    proc = bare_server.ctl(*args, check=False)
    assert proc.returncode == 1
    assert said in flat(proc.stderr) and "Traceback" not in proc.stderr
