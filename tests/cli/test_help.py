"""Every command's and option's help text reaches the user whole."""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner

from llmgw.cli.main import app


def every_command(cmd: Any, path: str = "llmgw") -> list[tuple[str, Any]]:
    # By what a group has, not by click's classes: typer builds its tree on its own copy of click.
    found = [(path, cmd)]
    for name, sub in getattr(cmd, "commands", {}).items():
        found += every_command(sub, f"{path} {name}")
    return found


def test_every_command_is_walked() -> None:
    paths = [path for path, _ in every_command(typer.main.get_command(app))]
    assert "llmgw ctl guard policy set" in paths and "llmgw node run" in paths


def test_no_help_text_has_square_brackets_which_the_help_renderer_would_swallow() -> None:
    # The help is rendered with rich markup: "[default: 3]" is read as a style and vanishes,
    # leaving "Seconds a target is skipped ." on the screen.
    swallowed = []
    for path, cmd in every_command(typer.main.get_command(app)):
        texts = [("", cmd.help or "")] + [(p.name or "", getattr(p, "help", None) or "") for p in cmd.params]
        swallowed += [f"{path} {name}".strip() for name, text in texts if "[" in text]
    assert not swallowed, swallowed


def test_help_shows_a_type_only_after_options_that_take_a_value() -> None:
    runner = CliRunner()
    for args in (["server", "init", "--help"], ["ctl", "--help"], ["ctl", "model", "add", "--help"]):
        out = runner.invoke(app, args, env={"COLUMNS": "200"}).stdout
        assert "<bool>" not in out, f"llmgw {' '.join(args)}:\n{out}"
    out = runner.invoke(app, ["server", "init", "--help"], env={"COLUMNS": "200"}).stdout
    demo = next(line for line in out.splitlines() if "--no-demo" in line)
    assert "<" not in demo, demo
    port = next(line for line in out.splitlines() if "--port" in line)
    assert "<int>" in port, port
