"""`llmgw ctl cache …`, `ctl model cache` and `ctl route cache`: the response cache, what it
spared, purging it, and a model's or route's own setting."""

from __future__ import annotations

from typing import Annotated

import typer

from llmgw.cli import render
from llmgw.cli.client import quote
from llmgw.cli.context import CtlContext, body
from llmgw.cli.ctl_models import cache_text, parse_idle
from llmgw.core.cache import CacheMode, CacheSpec
from llmgw.core.protocol.cache import CacheStatsOut, ModelCacheRequest, PurgeOut, PurgeRequest
from llmgw.core.protocol.routes import RouteOut
from llmgw.core.types import Model

cache_app = typer.Typer(help="The response cache: what it answered and spared, and purging it.",
                        no_args_is_help=True)

Opt = typer.Option
Mode = Annotated[CacheMode | None, Opt(
    "--cache", help="exact, semantic or off; not given: the install's cache mode (config.toml).")]
Ttl = Annotated[str | None, Opt(
    "--cache-ttl", help="How long an answer is kept: 30s, 10m, 1h or 1d; not given: the "
                        "install's cache ttl_s (config.toml).")]
Shared = Annotated[bool, Opt(
    "--shared/--per-tenant", help="Serve one tenant's kept answers to every tenant that may call "
                                  "it (only for answers that hold nothing of a tenant's).")]
Inherit = Annotated[bool, Opt(
    "--inherit", help="Drop its own setting: the install's cache setting applies.")]


def _spec(mode: CacheMode | None, ttl: str | None, shared: bool, inherit: bool) -> CacheSpec | None:
    if inherit:
        if mode is not None or ttl is not None or shared:
            render.error("--inherit takes no other option")
            raise typer.Exit(2)
        return None
    ttl_s = None
    if ttl is not None:
        ttl_s = parse_idle(ttl)
        if ttl_s is None:
            raise typer.BadParameter("a cache keeps an answer for a time: 30s, 10m, 1h or 1d",
                                     param_hint="--cache-ttl")
    return CacheSpec(mode=mode, ttl_s=ttl_s, shared=shared)


def model_cache(ctx: typer.Context,
                name: Annotated[str, typer.Argument(help="The catalog model.")],
                mode: Mode = None, ttl: Ttl = None, shared: Shared = False,
                inherit: Inherit = False) -> None:
    """Set a model's own response cache: on or off whatever the install's, its time to live,
    whether tenants share its answers."""
    ctl = CtlContext.of(ctx)
    request = ModelCacheRequest(cache=_spec(mode, ttl, shared, inherit))
    data = ctl.call("PUT", f"/admin/v1/models/{quote(name)}/cache", body(request))
    ctl.show_as(Model, data, lambda m: render.console.print(
        f"model {m.name}: cache {cache_text(m.cache)}", highlight=False))


def route_cache(ctx: typer.Context,
                name: Annotated[str, typer.Argument(help="The route.")],
                mode: Mode = None, ttl: Ttl = None, shared: Shared = False,
                inherit: Inherit = False) -> None:
    """Set a route's own response cache (its answers are kept under the route's name, whichever
    target gave them)."""
    ctl = CtlContext.of(ctx)
    route = RouteOut.model_validate(ctl.call("GET", f"/admin/v1/routes/{quote(name)}"))
    spec = route.model_dump(mode="json", exclude={"status", "by", "created_at", "updated_at"})
    cache = _spec(mode, ttl, shared, inherit)
    spec["cache"] = None if cache is None else cache.model_dump(mode="json")
    data = ctl.call("PUT", f"/admin/v1/routes/{quote(name)}", spec)
    ctl.show_as(RouteOut, data, lambda r: render.console.print(
        f"route {r.name}: cache {cache_text(r.cache)}", highlight=False))


@cache_app.command("stats")
def cache_stats(ctx: typer.Context, days: Annotated[int, Opt(
        min=1, max=366, help="Count today and the days before it, this many in all.")] = 1) -> None:
    """The install's mode; per model (or route): the mode its requests get and its own setting,
    requests, hits, hit rate and saved tokens, and the answers kept now."""
    ctl = CtlContext.of(ctx)
    data = ctl.call("GET", f"/admin/v1/cache?days={days}")

    def show(stats: CacheStatsOut) -> None:
        render.console.print(f"install's mode {stats.mode.value} (a model or route may set its "
                             f"own), kept in {stats.store}, since {stats.since}", highlight=False)
        render.table("cache", ["model", "mode", "own setting", "requests", "hits", "hit rate",
                               "saved tokens", "kept"],
                     [[m.model, m.mode.value, cache_text(m.own), m.requests, m.hits,
                       f"{m.hit_rate:.0%}", m.saved_tokens,
                       m.entries if m.entries is not None else "-"] for m in stats.models])

    ctl.show_as(CacheStatsOut, data, show)


@cache_app.command("purge")
def cache_purge(ctx: typer.Context, model: Annotated[str | None, Opt(
        help="Only this model's (or route's) answers; not given: every answer.")] = None) -> None:
    """Drop kept answers: at once from Redis (every server), or from each worker's memory at
    its next refresh (within a second)."""
    ctl = CtlContext.of(ctx)
    data = ctl.call("POST", "/admin/v1/cache/purge", body(PurgeRequest(model=model)))
    ctl.show_as(PurgeOut, data, lambda p: render.console.print(
        f"purged {p.purged} answers of {p.model or 'every model'}", highlight=False))
