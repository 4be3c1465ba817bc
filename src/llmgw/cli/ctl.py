"""`llmgw ctl`: the operator's CLI, a client of the admin API.

The one place its command tree is put together: each ctl_* module defines its own groups and
commands without knowing where they hang."""

from __future__ import annotations

from typing import Annotated

import typer

from llmgw.cli import (
    ctl_audit,
    ctl_cache,
    ctl_guard,
    ctl_jobs,
    ctl_keys,
    ctl_mcp,
    ctl_models,
    ctl_nodes,
    ctl_routes,
    ctl_teams,
    ctl_users,
)
from llmgw.cli.client import CONFIG_ENV, CONFIG_FILE, DEFAULT_URL, KEY_ENV, URL_ENV
from llmgw.cli.context import CtlContext

# No square brackets in help texts: typer reads them as rich markup and drops them, text and all.
app = typer.Typer(
    help="Operate a running llmgw through its admin API.\n\n"
         "The server URL and admin key come from, first to last: --url and --key; the environment "
         f"variables {URL_ENV} and {KEY_ENV}; the config file {CONFIG_FILE} (its `url` and `key`; "
         f"{CONFIG_ENV} names another file), which `llmgw server init --save-ctl-config` writes. "
         f"The URL is {DEFAULT_URL} when none of them gives one.",
    no_args_is_help=True,
)


@app.callback()
def _global(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(
        help=f"Server URL; else {URL_ENV}, else `url` in the config file, else {DEFAULT_URL}.")] = None,
    key: Annotated[str | None, typer.Option(
        help=f"Admin key; else {KEY_ENV}, else `key` in the config file.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    ctx.obj = CtlContext(url=url, key=key, json=json_out)


app.add_typer(ctl_models.model_app, name="model")
ctl_models.model_app.command("serve")(ctl_jobs.model_serve)
app.add_typer(ctl_models.replica_app, name="replica")
app.add_typer(ctl_models.cluster_app, name="cluster")
app.add_typer(ctl_nodes.node_app, name="node")
ctl_nodes.node_app.add_typer(ctl_nodes.token_app, name="token")
app.add_typer(ctl_guard.guard_app, name="guard")
ctl_guard.guard_app.add_typer(ctl_guard.policy_app, name="policy")
ctl_guard.guard_app.add_typer(ctl_guard.judge_app, name="judge")
app.add_typer(ctl_jobs.job_app, name="job")
app.add_typer(ctl_keys.key_app, name="key")
app.add_typer(ctl_keys.limits_app, name="limits")
app.add_typer(ctl_routes.route_app, name="route")
app.add_typer(ctl_teams.team_app, name="team")
app.add_typer(ctl_mcp.mcp_app, name="mcp")
app.add_typer(ctl_users.user_app, name="user")
app.add_typer(ctl_cache.cache_app, name="cache")
ctl_models.model_app.command("cache")(ctl_cache.model_cache)
ctl_routes.route_app.command("cache")(ctl_cache.route_cache)
app.command("usage")(ctl_keys.usage)
app.command("audit")(ctl_audit.audit)
