"""`llmgw ctl key …`, `ctl limits`, `ctl usage`: keys, limits and who used what."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from llmgw.cli import render
from llmgw.cli.client import quote
from llmgw.cli.context import CtlContext, body, options_for, query
from llmgw.cli.render import HIGH, LOW, Col
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.keys import KeyCreated, KeyOut, KeyRequest, KeyRevoked, UsageQuery, UsageRowOut
from llmgw.core.types import KeyScope, Limits, ToolGrants

key_app = typer.Typer(help="API keys: shown once, stored hashed.", no_args_is_help=True)
limits_app = typer.Typer(help="Limits that apply to every key that sets none.", no_args_is_help=True)

Opt = typer.Option
KeyRef = Annotated[str, typer.Argument(help="Id, name or visible prefix.")]
LIMIT_FIELDS = tuple(Limits.model_fields)
LIMIT_OPTIONS = {f: "--" + f.replace("_", "-") for f in LIMIT_FIELDS}


def limits_given(**values: int | None) -> dict[str, int]:
    """The `Limits` fields given (by name) on the command line."""
    return {k: v for k, v in values.items() if v is not None}


ToolsAllow = Annotated[list[str] | None, Opt(
    "--tools-allow", help="MCP tools it may use: a pattern over SERVER/TOOL (github, github/*, "
                          "*/read_*) (repeatable).")]
ToolsDeny = Annotated[list[str] | None, Opt(
    "--tools-deny", help="MCP tools it may not use, whatever allows them (repeatable).")]
TOOL_OPTIONS = {"ToolGrants.allow": "--tools-allow", "ToolGrants.deny": "--tools-deny"}


def tools_given(allow: list[str] | None, deny: list[str] | None) -> dict[str, ToolGrants]:
    """`tools` for a request body, when --tools-allow or --tools-deny was given."""
    return {"tools": ToolGrants(allow=allow or [], deny=deny or [])} if allow or deny else {}


def tools_text(tools: ToolGrants) -> str:
    """Grants as tables show them: the allow patterns, then the denied ones after a minus."""
    return ", ".join([*tools.allow, *(f"-{p}" for p in tools.deny)]) or "-"


def limits_text(limits: Limits) -> str:
    return ", ".join(f"{k} {v}" for k, v in limits.model_dump().items() if v is not None) or "-"


def _keys_table(keys: Sequence[KeyOut]) -> None:
    render.table(
        "keys",
        [Col("id", whole=True, optional=True), Col("name", whole=True), Col("key", whole=True), "scope",
         "team", "models", "limits", "expires", "revoked", Col("tools", optional=True),
         Col("by", optional=True), Col("note", optional=True)],
        [[k.id, k.name, k.label, k.scope, _team_text(k), ", ".join(k.models) or "all",
          limits_text(k.limits), render.when(k.expires_at, "never"), "yes" if k.revoked else "",
          tools_text(k.tools), k.by, k.note] for k in keys],
    )


def _team_text(k: KeyOut) -> str:
    return f"{k.team} (admin)" if k.team and k.team_admin else k.team or ""


def _shown_once(k: KeyCreated) -> None:
    render.console.print(f"key {k.name} ({k.id}), scope {k.scope}, limits "
                         f"{limits_text(k.limits)}\n\n  {k.key}\n\nshown once: store it now",
                         highlight=False)


@key_app.command("create")
def key_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The key's name: how lists, guard policies and "
                                                "`--key` filters refer to it.")],
    scope: Annotated[KeyScope, Opt(help="node: a join token (see `ctl node token`); metrics: may "
                                          "only scrape /metrics.", case_sensitive=False)] = KeyScope.USER,
    models: Annotated[str | None, Opt(help="Models it may use, comma-separated (patterns).")] = None,
    expires_in_days: Annotated[float | None, Opt(help="Expire after this many days.")] = None,
    rpm: Annotated[int | None, Opt(help="Requests per minute.")] = None,
    tpm: Annotated[int | None, Opt(help="Tokens per minute.")] = None,
    concurrent: Annotated[int | None, Opt(help="Requests in flight.")] = None,
    tokens_per_day: Annotated[int | None, Opt(help="Token budget per day (UTC).")] = None,
    tokens_per_month: Annotated[int | None, Opt(help="Token budget per month (UTC).")] = None,
    tool_calls_per_minute: Annotated[int | None, Opt(help="MCP tool calls per minute.")] = None,
    tool_concurrent: Annotated[int | None, Opt(help="MCP tool calls in flight.")] = None,
    note: Annotated[str, Opt(help="Owner or purpose.")] = "",
    team: Annotated[str | None, Opt(help="The team it belongs to (a user key's only): the team's "
                                         "models and limits hold too.")] = None,
    team_admin: Annotated[bool, Opt(help="With --team: the key may mint keys for its team and "
                                         "see the team's keys and usage.")] = False,
    tools_allow: ToolsAllow = None,
    tools_deny: ToolsDeny = None,
) -> None:
    """Create a key; it is shown once. A user key (via --key) mints only within its own grants;
    a team admin key, only for its team."""
    ctl = CtlContext.of(ctx)
    with options_for({"name": "NAME", "expires_in_days": "--expires-in-days", "note": "--note",
                      "team": "--team", **LIMIT_OPTIONS, **TOOL_OPTIONS}):
        request = KeyRequest(
            name=name, scope=scope, models=[m.strip() for m in (models or "").split(",") if m.strip()],
            expires_in_days=expires_in_days, note=note, team=team, team_admin=team_admin,
            limits=Limits(**limits_given(
                rpm=rpm, tpm=tpm, concurrent=concurrent, tokens_per_day=tokens_per_day,
                tokens_per_month=tokens_per_month, tool_calls_per_minute=tool_calls_per_minute,
                tool_concurrent=tool_concurrent)),
            **tools_given(tools_allow, tools_deny))
    ctl.show_as(KeyCreated, ctl.call("POST", "/admin/v1/keys", body(request)), _shown_once)


@key_app.command("list")
def key_list(ctx: typer.Context) -> None:
    """Every key (prefix and last four characters only)."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(DataList[KeyOut], ctl.call("GET", "/admin/v1/keys"), lambda d: _keys_table(d.data))


@key_app.command("show")
def key_show(ctx: typer.Context, key: KeyRef) -> None:
    """One key."""
    ctl = CtlContext.of(ctx)
    def shown(k: KeyOut) -> None:
        _keys_table([k])
        render.live(k.live)

    ctl.show_as(KeyOut, ctl.call("GET", f"/admin/v1/keys/{quote(key)}"), shown)


@key_app.command("revoke")
def key_revoke(ctx: typer.Context, key: KeyRef) -> None:
    """Revoke a key and every key minted beneath it: refused at once here, and by every server
    within its refresh interval."""
    ctl = CtlContext.of(ctx)

    def said(k: KeyRevoked) -> None:
        beneath = k.revoked_beneath
        also = f", and {beneath} key{'s' if beneath != 1 else ''} minted beneath it" if beneath else ""
        render.console.print(f"revoked {k.name} ({k.label}){also}", highlight=False)

    ctl.show_as(KeyRevoked, ctl.call("POST", f"/admin/v1/keys/{quote(key)}/revoke"), said)


@key_app.command("rotate")
def key_rotate(ctx: typer.Context, key: KeyRef) -> None:
    """A new secret with the same settings; the old one is revoked."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(KeyCreated, ctl.call("POST", f"/admin/v1/keys/{quote(key)}/rotate"), _shown_once)


@limits_app.command("default")
def limits_default(
    ctx: typer.Context,
    rpm: Annotated[int | None, Opt(help="Requests per minute.")] = None,
    tpm: Annotated[int | None, Opt(help="Tokens per minute.")] = None,
    concurrent: Annotated[int | None, Opt(help="Requests in flight.")] = None,
    tokens_per_day: Annotated[int | None, Opt(help="Token budget per day.")] = None,
    tokens_per_month: Annotated[int | None, Opt(help="Token budget per month.")] = None,
    tool_calls_per_minute: Annotated[int | None, Opt(help="MCP tool calls per minute.")] = None,
    tool_concurrent: Annotated[int | None, Opt(help="MCP tool calls in flight.")] = None,
    clear: Annotated[bool, Opt(help="Remove every default limit.")] = False,
) -> None:
    """Show the default limits, or set them (only the options given change)."""
    ctl = CtlContext.of(ctx)
    changes = limits_given(rpm=rpm, tpm=tpm, concurrent=concurrent, tokens_per_day=tokens_per_day,
                           tokens_per_month=tokens_per_month,
                           tool_calls_per_minute=tool_calls_per_minute,
                           tool_concurrent=tool_concurrent)
    if changes or clear:
        current = {} if clear else ctl.call("GET", "/admin/v1/limits/default")
        with options_for(LIMIT_OPTIONS):
            limits = Limits(**{**current, **changes})
        data = ctl.call("PUT", "/admin/v1/limits/default", body(limits))
    else:
        data = ctl.call("GET", "/admin/v1/limits/default")
    ctl.show_as(Limits, data, lambda d: render.console.print(f"default limits: {limits_text(d)}",
                                                             highlight=False))


def usage(
    ctx: typer.Context,
    key: Annotated[str | None, Opt(help="Id, name or prefix of one key.")] = None,
    model: Annotated[str | None, Opt(help="Only this model.")] = None,
    since: Annotated[str | None, Opt(help="First day, YYYY-MM-DD (UTC).")] = None,
    team: Annotated[str | None, Opt(help="The keys of one team.")] = None,
) -> None:
    """Requests, tokens, errors, guard blocks and cache hits per key, model and day."""
    ctl = CtlContext.of(ctx)
    filters = UsageQuery(**{k: v for k, v in {"key": key, "model": model, "since": since,
                                              "team": team}.items() if v})
    answer = ctl.call("GET", "/admin/v1/usage" + query(filters))
    ctl.show_as(DataList[UsageRowOut], answer, lambda d: render.table(
        "usage",
        # Keys by name (and id: a revoked key's name may be taken again), each with what it used.
        [Col("day", whole=True), Col("key", whole=True), Col("model", priority=HIGH),
         Col("requests", priority=HIGH), "prompt tokens", "completion tokens", "errors",
         Col("blocked", priority=LOW), Col("cached", priority=LOW),
         Col("saved tokens", priority=LOW)],
        [[u.day, _key(u), u.model, u.requests, u.prompt_tokens, u.completion_tokens, u.errors,
          u.blocked, u.cache_hits, u.saved_tokens] for u in d.data],
    ))


def _key(u: UsageRowOut) -> str:
    """A usage row's key as people know it: its name, and its id."""
    return f"{u.key_name} ({u.key_id})" if u.key_name else u.key_id
