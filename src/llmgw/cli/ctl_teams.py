"""`llmgw ctl team …`: teams of keys, with limits and token budgets on top of each key's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from llmgw.cli import render
from llmgw.cli.client import quote
from llmgw.cli.context import CtlContext, body, options_for
from llmgw.cli.ctl_keys import (
    LIMIT_OPTIONS,
    TOOL_OPTIONS,
    ToolsAllow,
    ToolsDeny,
    limits_given,
    limits_text,
    tools_given,
    tools_text,
)
from llmgw.core.protocol.common import DataList, Removed
from llmgw.core.protocol.keys import TeamOut, TeamRequest
from llmgw.core.types import Limits

team_app = typer.Typer(help="Teams: keys with shared limits and budgets, and team admin keys.",
                       no_args_is_help=True)

Opt = typer.Option
Name = Annotated[str, typer.Argument(help="The team's name.")]


def _teams_table(teams: Sequence[TeamOut]) -> None:
    render.table(
        "teams", ["name", "models", "limits", "weight", "keys", "tokens today",
                  "tokens this month", "by", "note", "tools"],
        [[t.name, ",".join(t.models) or "all", limits_text(t.limits), f"{t.weight:g}", t.keys,
          t.tokens_today, t.tokens_this_month, t.by, t.note, tools_text(t.tools)] for t in teams],
    )


@team_app.command("create")
def team_create(
    ctx: typer.Context,
    name: Name,
    models: Annotated[str | None, Opt(help="Models its keys may call, comma-separated (patterns) "
                                           "(default: any their keys may).")] = None,
    rpm: Annotated[int | None, Opt(help="Requests per minute, all its keys together.")] = None,
    tpm: Annotated[int | None, Opt(help="Tokens per minute, all its keys together.")] = None,
    concurrent: Annotated[int | None, Opt(help="Requests in flight, all its keys together.")] = None,
    tokens_per_day: Annotated[int | None, Opt(help="Token budget per day (UTC).")] = None,
    tokens_per_month: Annotated[int | None, Opt(help="Token budget per month (UTC).")] = None,
    tool_calls_per_minute: Annotated[int | None, Opt(help="MCP tool calls per minute, all its keys "
                                                          "together.")] = None,
    tool_concurrent: Annotated[int | None, Opt(help="MCP tool calls in flight, all its keys "
                                                    "together.")] = None,
    weight: Annotated[float, Opt(help="Its share of a busy model's slots against other teams' "
                                      "(2: twice a team of 1; a key outside teams weighs 1).")
                      ] = 1.0,
    note: Annotated[str, Opt(help="Owner or purpose.")] = "",
    replace: Annotated[bool, Opt(help="Change the team of this name (every option given anew).")
                       ] = False,
    tools_allow: ToolsAllow = None,
    tools_deny: ToolsDeny = None,
) -> None:
    """Create a team (or, with --replace, change one); its limits hold on top of each key's."""
    ctl = CtlContext.of(ctx)
    with options_for({"name": "NAME", "note": "--note", "weight": "--weight", **LIMIT_OPTIONS,
                      **TOOL_OPTIONS}):
        request = TeamRequest(
            name=name, models=[m.strip() for m in (models or "").split(",") if m.strip()],
            limits=Limits(**limits_given(
                rpm=rpm, tpm=tpm, concurrent=concurrent, tokens_per_day=tokens_per_day,
                tokens_per_month=tokens_per_month, tool_calls_per_minute=tool_calls_per_minute,
                tool_concurrent=tool_concurrent)),
            weight=weight, note=note, **tools_given(tools_allow, tools_deny))
    if replace:
        data = ctl.call("PUT", f"/admin/v1/teams/{quote(name)}", body(request))
    else:
        data = ctl.call("POST", "/admin/v1/teams", body(request))
    ctl.show_as(TeamOut, data, lambda t: _teams_table([t]))


@team_app.command("list")
def team_list(ctx: typer.Context) -> None:
    """Every team, its live keys and the tokens they used today and this month."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(DataList[TeamOut], ctl.call("GET", "/admin/v1/teams"), lambda d: _teams_table(d.data))


@team_app.command("show")
def team_show(ctx: typer.Context, name: Name) -> None:
    """One team."""
    ctl = CtlContext.of(ctx)
    def shown(t: TeamOut) -> None:
        _teams_table([t])
        render.live(t.live)

    ctl.show_as(TeamOut, ctl.call("GET", f"/admin/v1/teams/{quote(name)}"), shown)


@team_app.command("remove")
def team_remove(ctx: typer.Context, name: Name) -> None:
    """Remove a team; refused while it has live keys (revoke them first)."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(Removed, ctl.call("DELETE", f"/admin/v1/teams/{quote(name)}"),
                lambda r: render.console.print(f"removed team {r.name}", highlight=False))
