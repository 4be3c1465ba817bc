"""`llmgw ctl`'s command tree: every group is reachable and listed in the help, which says where the
server URL and admin key come from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llmgw.cli.client import config_path
from llmgw.cli.main import app

GROUPS = ["model", "replica", "cluster", "node", "guard", "job", "key", "limits", "route", "team", "mcp",
          "user", "cache"]


def test_ctl_help_lists_every_group_and_the_usage_command() -> None:
    out = CliRunner().invoke(app, ["ctl", "--help"], env={"COLUMNS": "200"}).stdout
    listed = [line.split()[1] for line in out.splitlines() if line.startswith("│ ") and
              len(line.split()) > 1 and not line.split()[1].startswith("-")]
    assert listed == ["usage", "audit", *GROUPS]


def test_nested_groups_and_commands_added_elsewhere_are_reachable() -> None:
    runner = CliRunner()
    for path, command in ((["ctl", "model"], "serve"), (["ctl", "node"], "token"),
                          (["ctl", "guard"], "policy"), (["ctl", "guard"], "judge"),
                          (["ctl", "model"], "cache"), (["ctl", "route"], "cache")):
        result = runner.invoke(app, [*path, command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, (path, command, result.output)


def test_ctl_help_says_where_the_url_and_key_come_from_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    out = CliRunner().invoke(app, ["ctl", "--help"], env={"COLUMNS": "200"}).stdout
    text = " ".join(out.split())
    # Each source named, first to last: the flags, the environment, the config file.
    order = ["--url and --key", "LLMGW_URL and LLMGW_ADMIN_KEY", "~/.config/llmgw/ctl.toml",
             "LLMGW_CTL_CONFIG names another file"]
    found = [text.find(s) for s in order]
    assert -1 not in found and found == sorted(found), out
    assert "Server URL; else LLMGW_URL, else `url` in the config file" in text
    assert "Admin key; else LLMGW_ADMIN_KEY, else `key` in the config file" in text
    # Help in square brackets used to be eaten as rich markup, leaving "Server URL ."
    assert not re.search(r"\s\.(\s|$)", text), out
    monkeypatch.delenv("LLMGW_CTL_CONFIG", raising=False)
    assert config_path() == Path("~/.config/llmgw/ctl.toml").expanduser()  # the file the help names
