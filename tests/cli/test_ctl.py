"""`llmgw ctl`'s command tree: every group is reachable and listed in the help."""

from __future__ import annotations

from typer.testing import CliRunner

from llmgw.cli.main import app

GROUPS = ["model", "replica", "cluster", "node", "guard", "job", "key", "limits", "route", "team"]


def test_ctl_help_lists_every_group_and_the_usage_command() -> None:
    out = CliRunner().invoke(app, ["ctl", "--help"], env={"COLUMNS": "200"}).stdout
    listed = [line.split()[1] for line in out.splitlines() if line.startswith("│ ") and
              len(line.split()) > 1 and not line.split()[1].startswith("-")]
    assert listed == ["usage", "audit", *GROUPS]


def test_nested_groups_and_commands_added_elsewhere_are_reachable() -> None:
    runner = CliRunner()
    for path, command in ((["ctl", "model"], "serve"), (["ctl", "node"], "token"),
                          (["ctl", "guard"], "policy"), (["ctl", "guard"], "judge")):
        result = runner.invoke(app, [*path, command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, (path, command, result.output)
