"""`llmgw ctl model …`, `ctl replica …`, `ctl cluster …`: the catalog, its replicas, the servers."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Annotated

import typer

from llmgw.cli import render
from llmgw.cli.client import quote
from llmgw.cli.context import CtlContext, body, options_for, parse, query
from llmgw.cli.render import Col
from llmgw.core.cache import CacheSpec
from llmgw.core.devices import named
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.models import FitOut, ModelOut, ReplicaQuery, ResourcesOut, ScaleRequest
from llmgw.core.protocol.nodes import ClusterOut, NodeOut
from llmgw.core.types import (
    Engine,
    HubSource,
    LocalSource,
    Model,
    Node,
    Profile,
    ProviderApi,
    RemoteSource,
    Replica,
    Scaling,
)

model_app = typer.Typer(help="The model catalog.", no_args_is_help=True)
replica_app = typer.Typer(help="Running engine processes.", no_args_is_help=True)
cluster_app = typer.Typer(help="Servers and the leader.", no_args_is_help=True)
ModelName = Annotated[str, typer.Argument(help="The model's catalog name.")]

# Which option of `model add` gives each field of the Model it sends.
MODEL_OPTIONS = {"Model.name": "NAME", "path": "--path", "base_url": "--base-url",
                 "api_key_env": "--api-key-env", "model": "--upstream-model", "Profile.name": "--profile",
                 "args": "--args", "cpu_cores": "--cores", "min_memory_gb": "--memory-gb",
                 "node_selector": "--node-selector", "gpu": "--gpus", "gpu_class": "--gpu-class",
                 "gpu_memory_gb": "--gpu-memory-gb", "gpu_layers": "--gpu-layers",
                 "Scaling.min": "--min", "Scaling.max": "--max", "command": "--command",
                 "env": "--env", "ready_path": "--ready-path", "Profile": "--command"}


def _source(m: Model, short: bool = False) -> str:
    """Where a model comes from; `short`, for lists: a local file by its name only."""
    s = m.source
    if isinstance(s, HubSource):
        return f"hf:{s.repo}/{s.file}@{s.revision}"
    if isinstance(s, LocalSource):
        return render.file_name(s.path) if short else s.path
    return f"{s.base_url} ({s.api})"


@model_app.command("list")
def model_list(ctx: typer.Context) -> None:
    """List catalog models and their state (cold, loading on NODE, ready, idle 3m)."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(
        DataList[ModelOut],
        ctl.call("GET", "/admin/v1/models"),
        lambda d: render.table(
            "models",
            [Col("name", whole=True), Col("source", clip=True), "profiles", "min", "max", "idle",
             "state", Col("cache", optional=True), Col("by", optional=True),
             Col("updated", optional=True)],
            [[m.name, _source(m, short=True), ", ".join(p.name for p in m.profiles) or "-", m.scaling.min,
              m.scaling.max, idle_text(m.scaling.idle_s), m.state, cache_text(m.cache), m.by,
              render.when(m.updated_at)]
             for m in d.data],
        ),
    )


@model_app.command("add")
def model_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Catalog name clients use as `model`.")],
    path: Annotated[str | None, typer.Option(
        help="Absolute path of a GGUF file in DATA_DIR/models or a model_roots directory.")] = None,
    base_url: Annotated[str | None, typer.Option(
        help="A remote provider's base URL, to which /chat/completions (--api openai) or /messages "
             "(--api anthropic) is appended: e.g. https://host/v1, or https://api.anthropic.com/v1 "
             "for Anthropic.")] = None,
    api: Annotated[ProviderApi | None, typer.Option(
        help="The dialect the remote provider speaks, openai unless given; with --base-url only.",
        case_sensitive=False)] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Env var on the server holding the remote API key: "
                                 "LLMGW_PROVIDER_*, or one listed in provider_key_env.")
    ] = None,
    upstream_model: Annotated[
        str | None, typer.Option(help="The remote provider's name for the model.")
    ] = None,
    profile: Annotated[str, typer.Option(
        help="Name of the profile these engine settings make (one way to run the model).")] = "default",
    args: Annotated[str, typer.Option(help="Extra engine arguments, one shell-quoted string.")] = "",
    cores: Annotated[int, typer.Option(help="CPU cores each replica holds.")] = 1,
    memory_gb: Annotated[float, typer.Option(help="Memory each replica holds, GB.")] = 1.0,
    min_replicas: Annotated[int, typer.Option("--min", help="Replicas kept ready.")] = 1,
    max_replicas: Annotated[int | None, typer.Option(
        "--max", help="The most replicas load may add; default: --min, or 1 with --min 0 (on "
                      "demand: the first request starts one).")] = None,
    node_selector: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE: place replicas only on nodes with this label (repeatable).")] = None,
    gpus: Annotated[int, typer.Option(help="GPUs each replica holds.")] = 0,
    gpu_class: Annotated[str | None, typer.Option(
        help="GPU class the replicas need (as nodes declare it, e.g. l4).")] = None,
    gpu_memory_gb: Annotated[float | None, typer.Option(
        help="GPU memory each replica needs across its GPUs, GB; default: GPUs fit by count.")
    ] = None,
    gpu_share: Annotated[bool, typer.Option(
        help="Replicas may share their GPUs with other sharing replicas, by memory.")] = False,
    gpu_layers: Annotated[int | None, typer.Option(
        help="Layers offloaded to the GPUs (partial offload); default: all.")] = None,
    command: Annotated[str | None, typer.Option(
        help="Run the model with this command (engine `command`: vLLM, SGLang, another "
             "llama-server), one shell-quoted string with placeholders {model_path} {model} "
             "{host} {port} {devices} {threads}; it must listen on {host}:{port}. The node must "
             "allow its program (engine_commands).")] = None,
    env: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE added to the command engine's environment (repeatable; placeholders "
             "as in --command but {port}). The engine key is in LLMGW_ENGINE_KEY.")] = None,
    ready_path: Annotated[str | None, typer.Option(
        help="Path the command engine answers 200 on once it serves; default /v1/models.")]
    = None,
) -> None:
    """Add a model: a local GGUF (--path) or a remote provider (--base-url); with --command,
    --path may be a directory and any OpenAI-compatible server runs it."""
    ctl = CtlContext.of(ctx)
    if (path is None) == (base_url is None):
        render.error("give exactly one source: --path FILE or --base-url URL")
        raise typer.Exit(2)
    if api is not None and path is not None:
        render.error("--api is the dialect of a remote provider: give it with --base-url, not --path")
        raise typer.Exit(2)
    if command is not None and path is None:
        render.error("--command runs the model on a node: give it with --path, not --base-url")
        raise typer.Exit(2)
    if command is None and (env or ready_path is not None):
        render.error("--env and --ready-path are for a command engine: give --command too")
        raise typer.Exit(2)
    selector = key_values(node_selector, "--node-selector")
    environment = key_values(env, "--env")
    engine = {} if command is None else {
        "engine": Engine.COMMAND, "command": shlex.split(command), "env": environment,
        "ready_path": ready_path}
    with options_for(MODEL_OPTIONS):
        if path is not None:
            source: LocalSource | RemoteSource = LocalSource(kind="local", path=path)
            profiles = [Profile.model_validate(
                {"name": profile, "engine": Engine.LLAMACPP, "args": shlex.split(args),
                 "cpu_cores": cores, "min_memory_gb": memory_gb, "node_selector": selector,
                 "gpu": gpus, "gpu_class": gpu_class, "gpu_memory_gb": gpu_memory_gb,
                 "gpu_share": gpu_share, "gpu_layers": gpu_layers, **engine})]
        else:
            # `api` is left out unless given, so a server that predates it still accepts the body.
            dialect = {"api": api} if api is not None else {}
            source = RemoteSource(kind="remote", base_url=base_url or "", api_key_env=api_key_env,
                                  model=upstream_model, **dialect)
            profiles = []
        on_node = isinstance(source, LocalSource)
        model = Model(name=name, source=source, profiles=profiles, scaling=Scaling(
            min=min_replicas if on_node else 0,
            max=max(min_replicas, 1) if max_replicas is None else max(max_replicas, min_replicas)))
    data = ctl.call("POST", "/admin/v1/models", body(model))
    ctl.show_as(Model, data, lambda m: render.console.print(f"added {m.name} (by {m.by})"))


def key_values(pairs: list[str] | None, option: str) -> dict[str, str]:
    """`KEY=VALUE` options as a dict; exits with a usage error on one without `=`."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            render.error(f"{option} takes KEY=VALUE, got {pair!r}")
            raise typer.Exit(2)
        out[key] = value
    return out


@model_app.command("remove")
def model_remove(ctx: typer.Context, name: ModelName) -> None:
    """Remove a model; its replicas are stopped."""
    ctl = CtlContext.of(ctx)
    data = ctl.call("DELETE", f"/admin/v1/models/{quote(name)}")
    ctl.show(data, lambda _d: render.console.print(f"removed {name}"))


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_idle(text: str) -> float | None:
    """`--idle`: a duration such as 30s, 10m, 2h or 1d (a bare number is seconds), or `off`
    (None: replicas above min stay)."""
    t = text.strip().lower()
    if t == "off":
        return None
    unit = _UNITS.get(t[-1:], 0)
    number = t[:-1] if unit else t
    try:
        value = float(number) * (unit or 1)
    except ValueError:
        value = -1.0
    if not value > 0:  # also false for nan
        raise typer.BadParameter(f"expected a duration like 30s, 10m or 2h, or off; got {text!r}")
    return value


def cache_text(spec: CacheSpec | None) -> str:
    """A model's or route's own cache setting as one cell: `exact 1h shared`, or `install's`."""
    if spec is None:
        return "install's"
    parts = [spec.mode.value if spec.mode is not None else "install's mode"]
    if spec.ttl_s is not None:
        parts.append(idle_text(spec.ttl_s))
    if spec.shared:
        parts.append("shared")
    return " ".join(parts)


def idle_text(idle_s: float | None) -> str:
    """An idle time as `--idle` takes it: 10m, 2h, 90s, or off."""
    if idle_s is None:
        return "off"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if idle_s >= size and idle_s % size == 0:
            return f"{int(idle_s // size)}{unit}"
    return f"{idle_s:g}s"


@model_app.command("scale")
def model_scale(
    ctx: typer.Context,
    name: ModelName,
    min_replicas: Annotated[int, typer.Option(
        "--min", help="Replicas kept ready; 0: on demand, started by the first request.")],
    max_replicas: Annotated[int | None, typer.Option(
        "--max", help="Upper bound when load adds replicas.")] = None,
    idle: Annotated[str | None, typer.Option(
        "--idle", help="Stop replicas above --min that served nothing for this long: 30s, 10m, "
                       "2h; off: they stay. Unchanged when not given.")] = None,
) -> None:
    """Change how many replicas the keeper keeps ready, and when idle ones stop."""
    ctl = CtlContext.of(ctx)
    idle_s = parse_idle(idle) if idle is not None else None
    with options_for({"min": "--min", "max": "--max", "idle_s": "--idle"}):
        # --idle left out leaves idle_s unset, which the server reads as "unchanged".
        request = (ScaleRequest(min=min_replicas, max=max_replicas) if idle is None
                   else ScaleRequest(min=min_replicas, max=max_replicas, idle_s=idle_s))
    data = ctl.call("POST", f"/admin/v1/models/{quote(name)}/scale", body(request))
    ctl.show_as(Model, data, lambda m: render.console.print(
        f"{m.name}: min {m.scaling.min}, max {m.scaling.max}, idle {idle_text(m.scaling.idle_s)} "
        f"(by {m.by})", highlight=False))


def _resources_table(d: ResourcesOut) -> None:
    m = d.model
    render.console.print(f"[bold]{m.name}[/]  source {_source(m)}  scaling "
                         f"{m.scaling.min}..{m.scaling.max}  idle {idle_text(m.scaling.idle_s)}  by {m.by}")
    est = d.estimates
    render.table(
        "profiles",
        ["name", "engine", "cores", "memory GB", "estimate (GiB)", "args or command"],
        [[p.name, p.engine, p.cpu_cores, p.min_memory_gb,
          est[p.name].describe if p.name in est else "-",
          shlex.join(p.command) if p.command else " ".join(p.args)] for p in m.profiles],
    )
    render.table(
        "placement",
        ["profile", "node", "fits", "why not", "running", "one more"],
        [[f.profile, f.node_id, "yes" if f.fits else "no", f.reason or "", f.running, _one_more(f)]
         for f in d.placement],
    )
    _replicas_table(d.replicas, d.nodes)
    if d.evictions:
        render.table(
            "swaps (replicas stopped to make room)",
            ["at", "replica", "of", "on", "for", "why"],
            [[render.when(e.at, seconds=True), e.replica, e.model, e.node, e.room_for, e.reason]
             for e in d.evictions],
        )


def _one_more(fit: FitOut) -> str:
    """Whether one more replica fits now; its reason only when "why not" does not say it."""
    if fit.one_more:
        return "yes"
    if fit.one_more_reason == fit.reason:
        return "no"
    return f"no: {fit.one_more_reason}"


def _replicas_table(replicas: Sequence[Replica], nodes: Sequence[Node] = ()) -> None:
    """Replicas as a table; `nodes` name their GPUs by class and index (h200:0)."""
    gpus = {(n.id, g.uuid): g for n in nodes for g in n.devices}
    render.table(
        "replicas",
        ["id", "model", "node", "profile", "state", Col("devices", priority=render.HIGH), "endpoint",
         "restarts", "last error"],
        [[r.id, r.model, r.node_id or "-", r.profile or "-", r.state,
          named(r.devices, [gpus[(r.node_id or "", u)] for u in r.devices
                            if (r.node_id or "", u) in gpus]),
          r.endpoint or "", r.restarts, _reason(r.last_error)] for r in replicas],
    )


def _reason(text: str | None) -> str:
    """A last error's first line (what happened and what to do) and where the engine's log is;
    the engine's own last lines stay in `--json` and the log."""
    lines = (text or "").splitlines()
    return "\n".join(lines[:1] + [ln for ln in lines[1:2] if ln.startswith("engine log: ")])


@model_app.command("resources")
def model_resources(ctx: typer.Context, name: ModelName) -> None:
    """Profiles, where each fits, replicas, and why a replica is pending."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(ResourcesOut, ctl.call("GET", f"/admin/v1/models/{quote(name)}/resources"), _resources_table)


@replica_app.command("list")
def replica_list(
    ctx: typer.Context, model: Annotated[str | None, typer.Option(help="Only this model.")] = None
) -> None:
    """List replicas and their state."""
    ctl = CtlContext.of(ctx)
    path = "/admin/v1/replicas" + query(ReplicaQuery(model=model) if model else ReplicaQuery())

    def text(d: DataList[Replica]) -> None:
        on_gpus = any(r.devices for r in d.data)
        nodes = parse(DataList[NodeOut], ctl.call("GET", "/admin/v1/nodes")).data if on_gpus else []
        _replicas_table(d.data, nodes)

    ctl.show_as(DataList[Replica], ctl.call("GET", path), text)


@cluster_app.command("status")
def cluster_status(ctx: typer.Context) -> None:
    """The servers, which one leads at which epoch, and when its lease expires."""
    ctl = CtlContext.of(ctx)

    def text(d: ClusterOut) -> None:
        render.table(
            "servers",
            ["id", "url", "state", "leader", "started", "last seen"],
            [[s.id + (" (this one)" if s.id == d.server else ""), s.url, s.state,
              "yes" if s.leader else "", s.started_at[:19], f"{s.seen_s_ago:g}s ago"]
             for s in d.servers],
        )
        render.console.print(
            f"server {d.server} ({d.database}): "
            f"{'leader at epoch ' + str(d.epoch) if d.leading else 'not the leader'}",
            highlight=False,
        )
        if d.lease:
            render.console.print(f"lease: {d.lease.holder}, epoch {d.lease.epoch}, expires "
                                 f"{d.lease.expires_at[:23]}", highlight=False)
        elif d.database == "sqlite":
            render.console.print("lease: none (on SQLite the one server is always the leader)",
                                 highlight=False)
        if d.last_reconcile_at:
            render.console.print(f"replica keeper: last pass {d.last_reconcile_at[:23]}",
                                 highlight=False)

    ctl.show_as(ClusterOut, ctl.call("GET", "/admin/v1/cluster"), text)
