"""`llmgw ctl`: the operator's CLI, a client of the admin API.

The one place its command tree is put together: each ctl_* module defines its own groups and
commands without knowing where they hang."""

from __future__ import annotations

from typing import Annotated

import typer

from llmgw.cli import (
    ctl_audit,
    ctl_guard,
    ctl_jobs,
    ctl_keys,
    ctl_models,
    ctl_nodes,
    ctl_routes,
    ctl_teams,
)
from llmgw.cli.context import CtlContext

app = typer.Typer(help="Operate a running llmgw through its admin API.", no_args_is_help=True)


@app.callback()
def _global(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help="Server URL [env LLMGW_URL].")] = None,
    key: Annotated[str | None, typer.Option(help="Admin key [env LLMGW_ADMIN_KEY].")] = None,
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
app.command("usage")(ctl_keys.usage)
app.command("audit")(ctl_audit.audit)
