"""`llmgw ctl route …`: public names in front of catalog models, with fallbacks and retries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from llmgw.cli import render
from llmgw.cli.client import quote
from llmgw.cli.context import CtlContext, body, options_for
from llmgw.cli.ctl_models import cache_text
from llmgw.core.protocol.common import DataList, Removed
from llmgw.core.protocol.routes import RouteOut
from llmgw.core.routes import Cooldown, FailOn, Fallback, Retry, RouteSpec, Strategy, Target

route_app = typer.Typer(help="Routes: one name in front of several catalog models, with "
                             "fallbacks, cooldowns and retries.", no_args_is_help=True)

Opt = typer.Option
Name = Annotated[str, typer.Argument(help="The route's name.")]
_OPTIONS = {"name": "NAME", "targets": "--to", "Target.weight": "--weights",
            "Fallback.attempts": "--attempts", "Cooldown.failures": "--cooldown-failures",
            "Cooldown.window_s": "--cooldown-window", "Cooldown.cooldown_s": "--cooldown",
            "Retry.attempts": "--retries", "Retry.backoff_ms": "--backoff-ms",
            "Retry.max_backoff_ms": "--max-backoff-ms", "RouteSpec": "--to"}


def _split(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def _targets(to: str, weights: str | None) -> list[Target]:
    names = _split(to)
    given = _split(weights)
    if given and len(given) != len(names):
        render.error(f"--weights gives {len(given)} weights for {len(names)} targets")
        raise typer.Exit(1)
    try:
        values = [int(w) for w in given] or [1] * len(names)
    except ValueError:
        render.error("--weights takes whole numbers, comma-separated")
        raise typer.Exit(1) from None
    return [Target(model=n, weight=w) for n, w in zip(names, values, strict=True)]


def _fail_on(text: str | None) -> list[FailOn] | None:
    if text is None:
        return None
    try:
        return [FailOn(p) for p in _split(text)]
    except ValueError:
        render.error("--fallback-on takes " + ", ".join(f.value for f in FailOn))
        raise typer.Exit(1) from None


def _targets_text(r: RouteSpec) -> str:
    weighted = r.strategy == Strategy.WEIGHTED
    return ", ".join(f"{t.model}×{t.weight}" if weighted else t.model for t in r.targets)


def _routes_table(routes: Sequence[RouteOut]) -> None:
    render.table(
        "routes", ["name", "strategy", "targets", "fallback on", "attempts", "retries", "cooling",
                   "by"],
        [[r.name, r.strategy.value, _targets_text(r), ",".join(f.value for f in r.fallback.on) or "-",
          r.fallback.attempts or "all", r.retry.attempts,
          ",".join(s.model for s in r.status if s.cooling_down_s > 0) or "-", r.by] for r in routes],
    )


def _route_detail(r: RouteOut) -> None:
    c, retry = r.fallback.cooldown, r.retry
    render.console.print(
        f"route {r.name}: {r.strategy.value}; falls back on "
        f"{', '.join(f.value for f in r.fallback.on) or 'nothing'}, trying "
        f"{f'up to {r.fallback.attempts}' if r.fallback.attempts else 'every'} target"
        f"{'s' if r.fallback.attempts and r.fallback.attempts > 1 else ''} per request; "
        f"cooldown {c.cooldown_s:g}s after "
        f"{c.failures} failure(s) within {c.window_s:g}s; {retry.attempts} retr"
        f"{'y' if retry.attempts == 1 else 'ies'} from {retry.backoff_ms} ms (at most "
        f"{retry.max_backoff_ms} ms); cache {cache_text(r.cache)}; by {r.by or '-'}",
        highlight=False)
    render.table(
        "targets (this server's view)",
        ["model", "weight", "ready", "in flight", "recent failures", "cooling down"],
        [[s.model, s.weight, s.ready if s.in_catalog else "not in catalog", s.in_flight,
          s.recent_failures, f"{s.cooling_down_s:.1f}s" if s.cooling_down_s > 0 else "no"]
         for s in r.status],
    )


@route_app.command("add")
def route_add(
    ctx: typer.Context,
    name: Name,
    to: Annotated[str, Opt("--to", help="Catalog models it routes to, comma-separated, in priority "
                                        "order.")],
    strategy: Annotated[Strategy, Opt(help="priority: the first healthy target; weighted: by "
                                           "--weights; least-busy: fewest requests in flight.",
                                      case_sensitive=False)] = Strategy.PRIORITY,
    weights: Annotated[str | None, Opt(help="One whole number per target, comma-separated "
                                            "(weighted).")] = None,
    fallback_on: Annotated[str | None, Opt(help="Failures that move a request to the next target, "
                                                "comma-separated: connect, 5xx, timeout, 429, "
                                                "context-length (default: connect,5xx,timeout,429)."
                                           )] = None,
    attempts: Annotated[int | None, Opt(help="Targets one request may try (default: all).")] = None,
    cooldown_failures: Annotated[int | None, Opt(help="Failures within the window that start a "
                                                      "target's cooldown (default: 3).")] = None,
    cooldown_window: Annotated[float | None, Opt(help="The window, in seconds (default: 60).")
                               ] = None,
    cooldown: Annotated[float | None, Opt(help="Seconds a target is skipped (default: 30).")] = None,
    retries: Annotated[int | None, Opt(help="Retries on the same target for connect errors and a "
                                            "remote provider's 429/503 (default: 0).")] = None,
    backoff_ms: Annotated[int | None, Opt(help="First retry's wait, doubling (default: 200).")
                          ] = None,
    max_backoff_ms: Annotated[int | None, Opt(help="Longest wait between retries, unless the "
                                                   "provider's Retry-After says longer "
                                                   "(default: 5000).")] = None,
    replace: Annotated[bool, Opt(help="Change the route of this name instead of adding one.")
                       ] = False,
) -> None:
    """Add a route (or, with --replace, change one): NAME is then a model clients can call."""
    ctl = CtlContext.of(ctx)
    given = {k: v for k, v in {"failures": cooldown_failures, "window_s": cooldown_window,
                               "cooldown_s": cooldown}.items() if v is not None}
    retry = {k: v for k, v in {"attempts": retries, "backoff_ms": backoff_ms,
                               "max_backoff_ms": max_backoff_ms}.items() if v is not None}
    with options_for(_OPTIONS):
        fallback = Fallback(**{k: v for k, v in {"on": _fail_on(fallback_on), "attempts": attempts,
                                                 "cooldown": Cooldown(**given) if given else None
                                                 }.items() if v is not None})
        spec = RouteSpec(name=name, targets=_targets(to, weights), strategy=strategy,
                         fallback=fallback, retry=Retry(**retry))
    sent = body(spec)
    if replace:
        data = ctl.call("PUT", f"/admin/v1/routes/{quote(name)}", sent)
    else:
        data = ctl.call("POST", "/admin/v1/routes", sent)
    ctl.show_as(RouteOut, data, _route_detail)


@route_app.command("list")
def route_list(ctx: typer.Context) -> None:
    """Every route, with the targets cooling down on the server that answered."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(DataList[RouteOut], ctl.call("GET", "/admin/v1/routes"), lambda d: _routes_table(d.data))


@route_app.command("show")
def route_show(ctx: typer.Context, name: Name) -> None:
    """One route and each target's state: ready upstreams, requests in flight, recent failures
    and cooldown, as the server that answered sees them."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(RouteOut, ctl.call("GET", f"/admin/v1/routes/{quote(name)}"), _route_detail)


@route_app.command("remove")
def route_remove(ctx: typer.Context, name: Name) -> None:
    """Remove a route: its name is unknown to clients from every server's next refresh."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(Removed, ctl.call("DELETE", f"/admin/v1/routes/{quote(name)}"),
                lambda r: render.console.print(f"removed route {r.name}", highlight=False))
