"""`llmgw ctl guard …`: policies, judges, the verdict log, and judge evaluation."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from llmgw.cli import render
from llmgw.cli.client import quote
from llmgw.cli.context import CtlContext, body, options_for, query
from llmgw.cli.render import HIGH, LOW, Col
from llmgw.core.guard import (
    Controversial,
    Direction,
    InputMode,
    JudgeFormat,
    JudgeSpec,
    OnFailure,
    Outcome,
    Policy,
    VerdictRecord,
)
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.guard import (
    EnableJudge,
    GuardOut,
    JudgeStatusOut,
    JudgmentRequest,
    SwitchesOut,
    SwitchRequest,
    VerdictQuery,
)

if TYPE_CHECKING:
    from llmgw.cli.evaluate import Report

guard_app = typer.Typer(help="Guard policies, judges and the verdict log.", no_args_is_help=True)
policy_app = typer.Typer(help="Which traffic is judged, by which judges.", no_args_is_help=True)
judge_app = typer.Typer(help="The judge models.", no_args_is_help=True)
PolicyName = Annotated[str, typer.Argument(help="The policy's name.")]

# Which option of `policy set` gives each field of the Policy it sends.
POLICY_OPTIONS = {"name": "NAME", "judges": "--judges", "models": "--models", "keys": "--keys",
                  "tools": "--tools",
                  "block_categories": "--block", "budget_ms": "--budget-ms",
                  "stream_window_chars": "--window-chars", "Policy": "--input/--output"}


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [t.strip() for t in text.split(",") if t.strip()]


def _checks(p: Policy) -> str:
    """What a policy judges: input, output or input+output, and whether input runs in parallel."""
    checks = "+".join(d for d, on in ((Direction.INPUT, p.input), (Direction.OUTPUT, p.output)) if on)
    return checks + (" (parallel)" if p.input and p.input_mode == InputMode.PARALLEL else "")


def _policies_table(policies: Sequence[Policy]) -> None:
    render.table(
        "policies",
        # What a policy judges with, within what time, and what a failure does, before the rest.
        [Col("name", whole=True), Col("on", priority=HIGH), Col("models", priority=HIGH),
         Col("keys", priority=LOW), Col("tools", priority=LOW), "checks", Col("judges", priority=HIGH),
         Col("blocks", priority=LOW),
         Col("controversial", priority=LOW), Col("budget ms", priority=HIGH),
         Col("on failure", priority=HIGH), Col("by", priority=LOW)],
        [[p.name, "yes" if p.enabled else "no", ",".join(p.models), ",".join(p.keys),
          ",".join(p.tools) or "none", _checks(p),
          ",".join(p.judges), ",".join(p.block_categories) or "all", p.controversial, p.budget_ms,
          p.on_failure, p.by] for p in policies],
    )


@guard_app.command("status")
def guard_status(ctx: typer.Context) -> None:
    """Whether the guard is on, and its policies."""
    ctl = CtlContext.of(ctx)

    def table(d: GuardOut) -> None:
        render.console.print(f"guard: {'on' if d.guard_enabled else 'OFF'}; prompt text in the "
                             f"verdict log: {'on' if d.log_prompts else 'off'}", highlight=False)
        _policies_table(d.policies)

    ctl.show_as(GuardOut, ctl.call("GET", "/admin/v1/guard"), table)


def _switch(ctl: CtlContext, name: str, on: bool) -> None:
    request = SwitchRequest(guard_enabled=on) if name == "guard_enabled" else SwitchRequest(log_prompts=on)
    data = ctl.call("POST", "/admin/v1/guard/switches", body(request))
    ctl.show_as(SwitchesOut, data, lambda d: render.console.print(
        f"guard {'on' if d.guard_enabled else 'off'}; prompt logging "
        f"{'on' if d.log_prompts else 'off'}", highlight=False))


@guard_app.command("on")
def guard_on(ctx: typer.Context) -> None:
    """Switch the guard on (policies apply again)."""
    _switch(CtlContext.of(ctx), "guard_enabled", True)


@guard_app.command("off")
def guard_off(ctx: typer.Context) -> None:
    """Switch the guard off as a whole: no request is judged."""
    _switch(CtlContext.of(ctx), "guard_enabled", False)


@guard_app.command("log-prompts")
def guard_log_prompts(ctx: typer.Context, on: Annotated[bool, typer.Argument(
        help="true: keep the judged text from now on; false: stop keeping it.")]) -> None:
    """Keep (or stop keeping) the judged text in the verdict log. Off by default."""
    _switch(CtlContext.of(ctx), "log_prompts", on)


@policy_app.command("list")
def policy_list(ctx: typer.Context) -> None:
    """All guard policies."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(DataList[Policy], ctl.call("GET", "/admin/v1/guard/policies"),
                lambda d: _policies_table(d.data))


@policy_app.command("show")
def policy_show(ctx: typer.Context, name: PolicyName) -> None:
    """One policy."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(Policy, ctl.call("GET", f"/admin/v1/guard/policies/{quote(name)}"),
                lambda p: _policies_table([p]))


@policy_app.command("set")
def policy_set(
    ctx: typer.Context,
    name: PolicyName,
    judges: Annotated[str | None, typer.Option(help="Judges, comma-separated (required when new).")] = None,
    models: Annotated[str | None, typer.Option(
        help="Models it applies to, comma-separated names or patterns (default when new: *).")] = None,
    keys: Annotated[str | None, typer.Option(
        help="Keys it applies to, comma-separated names or patterns (default when new: *).")] = None,
    tools: Annotated[list[str] | None, typer.Option(
        help="MCP tools it applies to, as patterns over SERVER/TOOL (a bare SERVER is all its "
             "tools); repeat it or separate with commas; replaces the list, and --tools '' "
             "empties it (default when new: none).")] = None,
    input: Annotated[bool | None, typer.Option(
        "--input/--no-input", help="Judge the prompts, and tool calls' arguments (on when new).")] = None,
    output: Annotated[bool | None, typer.Option(
        "--output/--no-output", help="Judge the answers, streams included, and tools' results "
                                     "(off when new).")] = None,
    input_mode: Annotated[InputMode | None, typer.Option(
        help="before: judge, then call the model; parallel: both at once.", case_sensitive=False)] = None,
    block: Annotated[str | None, typer.Option(help="Categories that block (default: all).")] = None,
    controversial: Annotated[Controversial | None, typer.Option(
        help="strict: Controversial counts as unsafe; loose: as safe.", case_sensitive=False)] = None,
    budget_ms: Annotated[int | None, typer.Option(
        help="Milliseconds a judgment may take before on-failure decides.")] = None,
    on_failure: Annotated[OnFailure | None, typer.Option(
        help="A judge that cannot answer in time: closed refuses, open lets through.",
        case_sensitive=False)] = None,
    window_chars: Annotated[
        int | None, typer.Option(help="Streams: characters held back per judgment.")
    ] = None,
    enabled: Annotated[bool | None, typer.Option(
        "--enabled/--disabled", help="Whether the policy applies; a disabled one is kept but "
                                     "judges nothing.")] = None,
) -> None:
    """Create a policy, or change the given fields of an existing one."""
    ctl = CtlContext.of(ctx)
    try:
        current = ctl.call("GET", f"/admin/v1/guard/policies/{quote(name)}", quiet_404=True)
    except LookupError:
        current = {}
    changes = {
        "judges": _split(judges), "models": _split(models), "keys": _split(keys),
        "tools": None if tools is None else [t for v in tools for t in _split(v) or []], "input": input,
        "output": output, "input_mode": input_mode, "block_categories": _split(block),
        "controversial": controversial, "budget_ms": budget_ms, "on_failure": on_failure,
        "stream_window_chars": window_chars, "enabled": enabled,
    }
    fields = {**{k: v for k, v in current.items() if k not in ("name", "by", "updated_at")},
              **{k: v for k, v in changes.items() if v is not None}}
    with options_for(POLICY_OPTIONS):
        policy = Policy(name=name, **fields)

    def saved(p: Policy) -> None:
        render.console.print(f"policy {p.name} saved (by {p.by})", highlight=False)
        _policies_table([p])

    ctl.show_as(Policy, ctl.call("PUT", f"/admin/v1/guard/policies/{quote(name)}", body(policy)), saved)


@policy_app.command("remove")
def policy_remove(ctx: typer.Context, name: PolicyName) -> None:
    """Remove a policy."""
    ctl = CtlContext.of(ctx)
    ctl.show(ctl.call("DELETE", f"/admin/v1/guard/policies/{quote(name)}"),
             lambda _d: render.console.print(f"removed policy {name}"))


@judge_app.command("enable")
def judge_enable(
    ctx: typer.Context,
    repo: Annotated[str, typer.Option(help="Hugging Face repo of the judge's GGUF.")],
    file: Annotated[str, typer.Option(help="GGUF file in the repo.")],
    name: Annotated[str | None, typer.Option(help="Judge name policies use.")] = None,
    format: Annotated[JudgeFormat, typer.Option(
        help="The prompt and verdict format the judge was trained on.", case_sensitive=False)
    ] = JudgeFormat.QWEN3GUARD,
    gpu: Annotated[bool, typer.Option(help="Run it on a GPU.")] = False,
) -> None:
    """Teach llmgw a judge it does not know by name; a policy naming it has it served."""
    ctl = CtlContext.of(ctx)
    with options_for({"repo": "--repo", "file": "--file", "name": "--name"}):
        request = EnableJudge(repo=repo, file=file, name=name, format=format, gpu=gpu)
    data = ctl.call("POST", "/admin/v1/guard/judges", body(request))
    ctl.show_as(JudgeSpec, data, lambda j: render.console.print(
        f"judge {j.name} enabled ({j.format} format); name it in a policy: "
        f"llmgw ctl guard policy set NAME --judges {j.name}", highlight=False))


@judge_app.command("status")
def judge_status(ctx: typer.Context) -> None:
    """Per judge: known or enabled, in the catalog, replicas (ready, wanted, max), keeper state,
    latency, its queue and slots now, judgments and sheds over the last 5 minutes, and the
    judgments per second it sustained there with p99 within budget."""
    ctl = CtlContext.of(ctx)

    def table(d: DataList[JudgeStatusOut]) -> None:
        render.table(
            "judges",
            # The keeper's state (why a judge is not there yet) and its replicas come first.
            [Col("judge", whole=True), Col("source", priority=LOW), "in catalog",
             Col("replicas", priority=HIGH), Col("keeper", priority=HIGH),
             Col("p50 ms", priority=LOW), Col("p99 ms", priority=LOW), "queue", "in flight/slots",
             "shed 5 min", Col("sustained/s", priority=LOW), "note"],
            [[j.judge, j.source, "yes" if j.in_catalog else "no", _replicas(j), j.keeper,
              j.p50_ms, j.p99_ms, j.queue_depth, f"{j.in_flight}/{j.slots}", _shed(j),
              "–" if j.sustained_per_s is None else f"{j.sustained_per_s:g}", j.note]
             for j in d.data],
        )
        for j in d.data:
            if j.scaling:
                render.console.print(f"scaling {j.judge}: {j.scaling}", highlight=False)
        leader = next((j.keeper_server for j in d.data if j.keeper_server), None)
        if leader:
            render.console.print(f"keeper: the leader's, on server {leader}", highlight=False)

    ctl.show_as(DataList[JudgeStatusOut], ctl.call("GET", "/admin/v1/guard/judges"), table)


def _replicas(j: JudgeStatusOut) -> str:
    """Ready replicas, and what the keeper wants of the catalog entry's max."""
    if j.replicas_wanted is None:
        return str(j.replicas_ready)
    return f"{j.replicas_ready} (wants {j.replicas_wanted}, max {j.replicas_max})"


def _shed(j: JudgeStatusOut) -> str:
    if not j.judged_5m:
        return "0"
    return f"{j.shed_5m} ({j.shed_5m / j.judged_5m:.0%})"


@guard_app.command("verdicts")
def verdicts(
    ctx: typer.Context,
    policy: Annotated[str | None, typer.Option(help="Only the verdicts of this policy.")] = None,
    judge: Annotated[str | None, typer.Option(help="Only the verdicts of this judge.")] = None,
    outcome: Annotated[Outcome | None, typer.Option(help="Only this outcome.", case_sensitive=False)] = None,
    since: Annotated[str | None, typer.Option(help="ISO time, e.g. 2026-11-29T10:00:00+00:00.")] = None,
    request_id: Annotated[str | None, typer.Option(help="Only the verdicts on this request "
                                                        "(its x-request-id).")] = None,
    limit: Annotated[int, typer.Option(help="The most verdicts shown.")] = 50,
) -> None:
    """The verdict log, newest first."""
    ctl = CtlContext.of(ctx)
    given = {"policy": policy, "judge": judge, "outcome": outcome, "since": since,
             "request_id": request_id}
    with options_for({"since": "--since", "limit": "--limit"}):
        filters = VerdictQuery(limit=limit, **{k: v for k, v in given.items() if v is not None})
    ctl.show_as(
        DataList[VerdictRecord],
        ctl.call("GET", "/admin/v1/guard/verdicts" + query(filters)),
        lambda d: render.table(
            "verdicts",
            ["at", "policy", "judge", "dir", "outcome", "categories", "let through", "ms", "model", "key"],
            [[render.when(v.at, seconds=True), v.policy, v.judge, v.direction, v.outcome,
              ",".join(v.categories), "yes" if v.let_through else "", v.latency_ms, v.model, v.key]
             for v in d.data],
        ),
    )


@guard_app.command("eval")
def guard_eval(
    ctx: typer.Context,
    judge: Annotated[str, typer.Option(help="The judge to evaluate.")],
    set_: Annotated[str | None, typer.Option(
        "--set", help="A shipped set (xstest, jbb, jbb-pair, sst) or a JSONL file: "
                      '{"text", "label": "safe"|"unsafe", "direction", "category"} a line.')] = None,
    file: Annotated[Path | None, typer.Option(help="A JSONL file of cases (the same as --set FILE).")] = None,
    policy: Annotated[Controversial, typer.Option(
        help="strict: a Controversial verdict counts as unsafe; loose: as safe.",
        case_sensitive=False)] = Controversial.STRICT,
    strict: Annotated[bool | None, typer.Option(
        "--strict/--no-strict", hidden=True, help="The old spelling of --policy strict|loose.")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Judgments in flight at once.")] = 1,
    limit: Annotated[int | None, typer.Option(
        min=1, help="Judge only this many cases, taken evenly across the set.")] = None,
    budget_ms: Annotated[int, typer.Option(help="Milliseconds each judgment may take.")] = 5000,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Precision, recall, F1, over-blocking and latency of a judge on a public set or your own cases."""
    ctl = CtlContext.of(ctx)
    from llmgw.cli.client import AdminClient, CtlError
    from llmgw.cli.eval_run import cases_of, judge_all
    from llmgw.cli.evaluate import Case, score, spread

    if (set_ is None) == (file is None):
        render.error("give the cases with --set NAME|FILE (or --file FILE)")
        raise typer.Exit(2)
    if strict is not None:
        policy = Controversial.STRICT if strict else Controversial.LOOSE
    try:
        name, cases = cases_of(set_ if set_ is not None else str(file))
    except (OSError, ValueError) as exc:
        render.error(str(exc))
        raise typer.Exit(2) from None
    cases = spread(cases, limit)
    try:
        # A judgment may take its whole budget, queue included: the call waits that long and more.
        client = replace(AdminClient.resolve(ctl.url, ctl.key), timeout_s=budget_ms / 1000 + 30)
    except CtlError as exc:
        render.error(str(exc))
        raise typer.Exit(1) from None

    def one(c: Case) -> dict[str, Any]:
        request = JudgmentRequest(judge=judge, text=c.text, direction=c.direction, budget_ms=budget_ms)
        return dict(client.call("POST", "/admin/v1/guard/judgments", body(request)))

    started = time.monotonic()
    try:
        answers = judge_all(one, cases, concurrency, f"{judge} on {name}")
    except CtlError as exc:
        render.error(str(exc))
        raise typer.Exit(1) from None
    seconds = round(time.monotonic() - started, 1)
    errors = sorted({a["error"] for a in answers if a.get("error")})
    if answers and all(a.get("verdict") is None for a in answers):
        render.error(f"no case was judged: {'; '.join(errors[:3])}")
        raise typer.Exit(1)
    for message in errors[:5]:
        render.error(f"some judgments failed: {message}")
    report = score(cases, answers, policy=policy)
    if ctl.json or json_out:
        render.emit_json({"judge": judge, "set": name, "policy": policy, "seconds": seconds,
                          **report.model_dump(mode="json")})
        return
    _eval_tables(f"{judge} on {name} ({policy}, {seconds} s)", report)


def _eval_tables(title: str, report: Report) -> None:
    def rate(value: float | None, present: int) -> str:
        return "" if value is None or not present else f"{value:.3f}"

    render.table(title, ["cases", "precision", "recall", "F1", "over-block", "failed", "p50 ms", "p95 ms"],
                 [[report.cases, report.precision, report.recall, report.f1,
                   rate(report.over_block, report.fp + report.tn), report.failed, report.p50_ms,
                   report.p95_ms]])
    if report.categories:
        render.table("by category", ["category", "cases", "failed", "flagged", "recall", "over-block"],
                     [[name, c.cases, c.failed, c.tp + c.fp, rate(c.recall, c.tp + c.fn),
                       rate(c.over_block, c.fp + c.tn)] for name, c in report.categories.items()])
