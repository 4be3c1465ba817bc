"""`llmgw ctl model serve` and `llmgw ctl job …`: serve jobs with progress."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from llmgw.cli import render
from llmgw.cli.context import CtlContext, body, options_for, parse, query
from llmgw.cli.render import HIGH, LOW, Col
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.models import JobOut, JobState, ReplicaQuery, ServeRequest
from llmgw.core.settings import DEFAULT_CTX_SIZE
from llmgw.core.types import HubSource, Replica, ReplicaState, Scaling

job_app = typer.Typer(help="Serve jobs: fetching, adding and placing models.", no_args_is_help=True)

POLL_S = 0.5
JobId = Annotated[str, typer.Argument(help="The job's id, as `ctl job list` shows it.")]


def _default_name(file: str) -> str:
    stem = file.rsplit("/", 1)[-1].removesuffix(".gguf").lower()
    return re.sub(r"[^a-z0-9._-]+", "-", stem).strip("-") or "model"


def model_serve(
    ctx: typer.Context,
    repo: Annotated[str, typer.Option(help="Hugging Face repo, e.g. Qwen/Qwen3-0.6B-GGUF.")],
    file: Annotated[str, typer.Option(help="GGUF file in the repo.")],
    revision: Annotated[str, typer.Option(help="Branch, tag or commit.")] = "main",
    name: Annotated[str | None, typer.Option(help="Catalog name; default: from the file.")] = None,
    cores: Annotated[int, typer.Option(help="CPU cores each replica holds.")] = 2,
    memory_gb: Annotated[
        float | None, typer.Option(help="Memory each replica holds; default: sized from the GGUF.")
    ] = None,
    ctx_size: Annotated[int, typer.Option(help="llama-server --ctx-size.")] = DEFAULT_CTX_SIZE,
    args: Annotated[str, typer.Option(help="Extra llama-server arguments, shell-quoted.")] = "",
    min_replicas: Annotated[int, typer.Option("--min", help="Replicas kept ready.")] = 1,
    if_absent: Annotated[
        bool, typer.Option(help="Give way to a model of that name added meanwhile.")
    ] = False,
    wait: Annotated[bool, typer.Option(
        help="Show progress until replicas are ready (with --min 0: until the model is added; "
             "its first request starts it).")] = False,
) -> None:
    """Fetch a GGUF from Hugging Face, size it, add it to the catalog and serve it."""
    import shlex

    ctl = CtlContext.of(ctx)
    with options_for({"name": "--name", "repo": "--repo", "file": "--file", "revision": "--revision",
                      "cores": "--cores", "memory_gb": "--memory-gb", "ctx_size": "--ctx-size",
                      "args": "--args", "min": "--min"}):
        request = ServeRequest(
            name=name or _default_name(file),
            source=HubSource(kind="hf", repo=repo, file=file, revision=revision),
            cores=cores, memory_gb=memory_gb, ctx_size=ctx_size, args=shlex.split(args),
            scaling=Scaling(min=min_replicas, max=max(min_replicas, 1)), if_absent=if_absent,
        )
    answer = ctl.call("POST", "/admin/v1/jobs", body(request))
    if not wait:
        ctl.show_as(JobOut, answer, lambda j: render.console.print(
            f"job {j.id}: {j.state} (serve {j.model}); follow it with `llmgw ctl job watch {j.id}`",
            highlight=False))
        return
    job = parse(JobOut, answer)
    render.console.print(f"job {job.id}: serving {job.model} from {repo}/{file}", highlight=False)
    final = _watch(ctl, job.id)
    if final.state != JobState.RUNNING:
        raise typer.Exit(1)
    if min_replicas == 0:
        # An on-demand model has no replica until a request comes: there is none to wait for.
        render.console.print(f"{final.model} is on demand: its first request starts a replica",
                             highlight=False)
        return
    _wait_ready(ctl, final.model)


def _watch(ctl: CtlContext, job_id: str) -> JobOut:
    """Progress until the job finishes; returns its last state."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
               TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=render.console, transient=False) as bar:
        task = bar.add_task("queued", total=None)
        while True:
            job = parse(JobOut, ctl.call("GET", f"/admin/v1/jobs/{job_id}"))
            bar.update(task, description=job.state, total=job.bytes_total or None,
                       completed=job.bytes_done)
            if job.state.finished:
                break
            time.sleep(POLL_S)
    _say_outcome(job)
    return job


def _say_outcome(job: JobOut) -> None:
    if job.state == JobState.RUNNING:
        render.console.print(f"[green]added[/] {job.model}", highlight=False)
        if job.warning:
            render.console.print(f"[yellow]warning[/]: {job.warning}", highlight=False)
        if job.estimate:
            render.console.print(f"memory estimate: {job.estimate}", highlight=False)
    elif job.state == JobState.GAVE_WAY:
        render.console.print(f"[yellow]gave way[/]: {job.error}", highlight=False)
    else:
        render.error(f"job {job.id} {job.state}: {job.error or ''}")


def _wait_ready(ctl: CtlContext, model: str) -> None:
    with render.console.status(f"waiting for a ready replica of {model}…"):
        while True:
            answer = ctl.call("GET", "/admin/v1/replicas" + query(ReplicaQuery(model=model)))
            reps = parse(DataList[Replica], answer).data
            if any(r.state == ReplicaState.READY for r in reps):
                break
            pending = [r for r in reps
                       if r.state in (ReplicaState.PENDING, ReplicaState.FAILED) and r.last_error]
            if pending and all(r.state == ReplicaState.PENDING for r in reps):
                render.error(f"{model} cannot be placed: {pending[0].last_error}")
                raise typer.Exit(1)
            time.sleep(POLL_S)
    render.console.print(f"[green]ready[/]: {model} answers at /v1/chat/completions", highlight=False)


def _jobs_table(jobs: Sequence[JobOut]) -> None:
    render.table(
        "jobs",
        # A failed job's error is what the table is read for.
        [Col("id", whole=True), Col("model", priority=HIGH), Col("state", priority=HIGH),
         "progress", Col("by", priority=LOW), Col("error", priority=HIGH)],
        [[j.id, j.model, j.state, _progress(j), j.request.by,
          j.error or (f"warning: {j.warning}" if j.warning else "")] for j in jobs],
    )


def _progress(j: JobOut) -> str:
    if not j.bytes_total:
        return ""
    pct = 100 * j.bytes_done / j.bytes_total
    return f"{pct:.0f}% of {j.bytes_total / 2**20:.1f} MiB"


@job_app.command("list")
def job_list(ctx: typer.Context) -> None:
    """All serve jobs, oldest first."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(DataList[JobOut], ctl.call("GET", "/admin/v1/jobs"), lambda d: _jobs_table(d.data))


@job_app.command("show")
def job_show(ctx: typer.Context, job_id: JobId) -> None:
    """One job in full."""
    ctl = CtlContext.of(ctx)

    def detail(j: JobOut) -> None:
        _jobs_table([j])
        src = j.request.source
        where = f"{src.repo}/{src.file}" if isinstance(src, HubSource) else src.path
        render.console.print(f"source: {where}", highlight=False)
        if j.estimate:
            render.console.print(f"memory estimate: {j.estimate}", highlight=False)
        if j.warning:
            render.console.print(f"warning: {j.warning}", highlight=False)

    ctl.show_as(JobOut, ctl.call("GET", f"/admin/v1/jobs/{job_id}"), detail)


@job_app.command("watch")
def job_watch(ctx: typer.Context, job_id: JobId) -> None:
    """Progress until the job finishes."""
    final = _watch(CtlContext.of(ctx), job_id)
    if final.state in (JobState.FAILED, JobState.CANCELLED):
        raise typer.Exit(1)


@job_app.command("cancel")
def job_cancel(ctx: typer.Context, job_id: JobId) -> None:
    """Stop a job that has not finished (a partial download is kept for a later resume)."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(JobOut, ctl.call("POST", f"/admin/v1/jobs/{job_id}/cancel"),
                lambda j: render.console.print(f"job {j.id}: {j.state}", highlight=False))
