"""The `llmgw` command."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from llmgw import __version__
from llmgw.cli import ctl, render
from llmgw.cli.client import write_config
from llmgw.core.errors import LlmgwError
from llmgw.core.settings import default_data_dir

# A traceback's local variables may hold keys and secrets: never print them, whatever typer's
# version defaults to.
app = typer.Typer(help="llmgw: a self-hosted LLM gateway.", no_args_is_help=True,
                  pretty_exceptions_show_locals=False)
server_app = typer.Typer(help="Set up and run the server.", no_args_is_help=True)
app.add_typer(server_app, name="server")
node_app = typer.Typer(help="Run a node agent on this machine.", no_args_is_help=True)
app.add_typer(node_app, name="node")
app.add_typer(ctl.app, name="ctl")


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class LogFormat(StrEnum):
    JSON = "json"
    TEXT = "text"


# Choices, so a misspelt level is a usage error (exit 2) rather than a traceback.
LogLevelOpt = Annotated[LogLevel, typer.Option(help="How much to log: debug, info, warning or error.")]
LogFormatOpt = Annotated[LogFormat, typer.Option(help="json (one object per line) or text.")]

DataDir = Annotated[
    Path | None,
    typer.Option(help="Data directory (env LLMGW_DATA_DIR; default ~/.local/share/llmgw)."),
]


@app.command()
def version() -> None:
    """Print llmgw's version."""
    render.console.print(__version__)


@server_app.command("init")
def server_init(
    data_dir: DataDir = None,
    host: Annotated[str, typer.Option(help="Address the server listens on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port the server listens on.")] = 8080,
    database: Annotated[
        str, typer.Option(help="SQLAlchemy database URL; default: SQLite in the data dir.")
    ] = "",
    demo: Annotated[
        bool, typer.Option(help="Register the demo model and demo judge (Gemma 3 270M).")
    ] = False,
    guard: Annotated[
        bool, typer.Option(help="Create the default guard policy (input of every model judged).")
    ] = True,
    save_ctl_config: Annotated[
        bool, typer.Option(help="Save the URL and new admin key for `llmgw ctl` (mode 0600).")
    ] = False,
    judge_node: Annotated[list[str] | None, typer.Option(
        help="LABEL=VALUE of the judge machine: the guard's judge runs only on nodes with "
             "this label (repeatable).")] = None,
    embedded_node: Annotated[bool, typer.Option(
        help="Run replicas inside the server too (one machine); HA servers usually leave them "
             "to `llmgw node run` agents.")] = True,
) -> None:
    """Create the data dir, config, database and first admin key. Safe to run twice."""
    from llmgw.server.init import init

    directory = data_dir or default_data_dir()
    try:
        result = init(directory, host=host, port=port, database=database, demo=demo, guard=guard,
                      judge_node=_pairs(judge_node or [], "--judge-node") or None,
                      embedded_node=embedded_node)
    except LlmgwError as exc:
        render.error(exc.message)
        raise typer.Exit(1) from None
    for line in result.created:
        render.console.print(f"[green]created[/] {line}", highlight=False)
    for line in result.existed:
        render.console.print(f"[dim]exists[/]  {line}", highlight=False)
    if result.admin_key:
        render.console.print(
            f"\nAdmin key (shown once, stored hashed):\n  {result.admin_key}\n", highlight=False
        )
        if save_ctl_config:
            s = result.settings
            path = write_config(f"http://{s.host}:{s.port}", result.admin_key)
            render.console.print(f"saved for `llmgw ctl` in {path}", highlight=False)
    elif not result.created:
        render.console.print("nothing to do: everything exists and was left unchanged")


@server_app.command("run")
def server_run(
    data_dir: DataDir = None,
    host: Annotated[str | None, typer.Option(help="Override the configured address.")] = None,
    port: Annotated[int | None, typer.Option(help="Override the configured port.")] = None,
    log_level: LogLevelOpt = LogLevel.INFO,
    log_format: LogFormatOpt = LogFormat.JSON,
    workers: Annotated[int | None, typer.Option(
        min=0, max=64,
        help="Processes serving the port; 0: one per core, at most 8 (default: "
             "the config's `workers`, 0).")] = None,
) -> None:
    """Serve the API, run the replica keeper and the embedded node agent."""
    from llmgw.server import logs
    from llmgw.server.run import run

    logs.setup(log_level.value, log_format.value)
    try:
        run(
            data_dir or default_data_dir(),
            host,
            port,
            lambda url: render.console.print(f"llmgw listening on {url}", highlight=False),
            workers,
            (log_level.value, log_format.value),
        )
    except LlmgwError as exc:
        render.error(exc.message)
        raise typer.Exit(1) from None
    except OSError as exc:
        render.error(f"cannot start: {exc}")
        raise typer.Exit(1) from None


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key:
            render.error(f"{flag} takes KEY=VALUE, got {v!r}")
            raise typer.Exit(2)
        out[key] = value
    return out


@node_app.command("run")
def node_run(
    server: Annotated[str | None, typer.Option(
        help="Server URL(s), comma-separated; tried in turn.",
        envvar="LLMGW_SERVER")] = None,
    token: Annotated[str | None, typer.Option(
        help="Join token from `llmgw ctl node token create`; better in env LLMGW_NODE_TOKEN, "
             "out of shell history and ps.",
        envvar="LLMGW_NODE_TOKEN")] = None,
    config: Annotated[Path | None, typer.Option(
        help="TOML file whose `node` table holds these options (without the dashes); "
             "flags win.")] = None,
    node_id: Annotated[str | None, typer.Option(help="This node's id; default: the hostname.")]
    = None,
    address: Annotated[str | None, typer.Option(
        help="Address engines listen on and servers reach; default: the one that routes to "
             "the first server.")] = None,
    label: Annotated[list[str] | None, typer.Option(
        help="KEY=VALUE label for node selectors (repeatable).")] = None,
    cores: Annotated[int | None, typer.Option(help="Cores to offer; default: probed.")] = None,
    memory_gb: Annotated[float | None, typer.Option(help="Memory to offer; default: probed.")]
    = None,
    gpu: Annotated[list[str] | None, typer.Option(
        help="CLASS=COUNT GPUs to offer (repeatable), declared by hand: they replace the GPUs "
             "found through NVIDIA's driver.")] = None,
    gpu_class: Annotated[list[str] | None, typer.Option(
        help="FOUND=CLASS: offer the found GPUs of class FOUND as CLASS (repeatable).")] = None,
    hide_gpu: Annotated[list[str] | None, typer.Option(
        help="A found GPU never to offer, by index or UUID (repeatable).")] = None,
    data_dir: Annotated[Path | None, typer.Option(
        help="Model files and engine logs; default: node/ in the data dir.")] = None,
    interval: Annotated[float | None, typer.Option(
        help="Seconds between reports to the servers (the heartbeat); default 5.")] = None,
    engine_command: Annotated[list[str] | None, typer.Option(
        help="A program `command` engines may run here, by name or absolute path, as profiles "
             "give it (repeatable); none by default.")] = None,
    mcp_command: Annotated[list[str] | None, typer.Option(
        help="A program stdio MCP servers may run here, by name or absolute path, as their "
             "command gives it (repeatable); none by default.")] = None,
    log_level: LogLevelOpt = LogLevel.INFO,
    log_format: LogFormatOpt = LogFormat.JSON,
) -> None:
    """Join this machine to the servers and run the replicas they place on it.

    It keeps running its replicas while no server is reachable, and catches up when one is."""
    import asyncio

    from llmgw.core.names import check_gpu_class
    from llmgw.node.gpus import GpuRules
    from llmgw.server import logs
    from llmgw.server.node_run import NodeConfig, NodeOptions, load_config, run_node

    try:
        file = load_config(config) if config else NodeConfig()
    except LlmgwError as exc:
        render.error(exc.message)
        raise typer.Exit(2) from None
    gpus = dict(file.gpus)
    for cls, count in _pairs(gpu or [], "--gpu").items():
        if not count.isdigit():
            render.error(f"--gpu takes CLASS=COUNT, got {cls}={count}")
            raise typer.Exit(2)
        gpus[cls] = int(count)
    renames = {**file.gpu_classes, **_pairs(gpu_class or [], "--gpu-class")}
    try:
        for name in (*gpus, *renames, *renames.values()):
            check_gpu_class(name)
    except ValueError as exc:
        render.error(f"{name!r}: {exc}")
        raise typer.Exit(2) from None
    servers = [s.strip() for s in server.split(",") if s.strip()] if server else file.server
    secret = (token or file.token or "").strip()
    interval_s = interval if interval is not None else file.interval_s or 5.0
    if not servers or not secret or interval_s <= 0:
        render.error("give at least one --server URL, a --token and a positive --interval "
                     "(as flags, env LLMGW_SERVER and LLMGW_NODE_TOKEN, or in --config)")
        raise typer.Exit(2)
    opts = NodeOptions(
        servers=servers, token=secret,
        data_dir=data_dir or file.data_dir or default_data_dir() / "node",
        labels={**file.labels, **_pairs(label or [], "--label")},
        cores=cores if cores is not None else file.cores,
        memory_gb=memory_gb if memory_gb is not None else file.memory_gb,
        gpus=gpus, address=address or file.address, interval_s=interval_s,
        gpu_rules=GpuRules(renames, frozenset([*file.hide_gpus, *(hide_gpu or [])])),
        engine_commands=[*file.engine_commands, *(engine_command or [])],
        mcp_commands=[*file.mcp_commands, *(mcp_command or [])],
    )
    if node_id or file.node_id:
        opts.node_id = node_id or file.node_id or opts.node_id
    logs.setup(log_level.value, log_format.value)
    try:
        asyncio.run(run_node(opts))
    except LlmgwError as exc:
        render.error(exc.message)
        raise typer.Exit(1) from None


@app.command()
def doctor(
    data_dir: DataDir = None,
    model: Annotated[Path | None, typer.Option(
        help="GGUF file the engine probe runs; default: the smallest model file of the "
             "catalog present here.")] = None,
    probe: Annotated[bool, typer.Option(
        help="Start llama-server on the model and generate a few tokens (about 10 s).")] = True,
) -> None:
    """Check that this machine can run llmgw: data dir, config, port, database, GPUs (NVIDIA's
    driver and CUDA versions), engine binary and the GPU backends it was built with, model
    files, and a probe of the engine on a real model (on the first GPU when it can use one).

    When the probe dies of an illegal instruction (SIGILL) it tries again with --no-repack and,
    if that answers, every later start on this host uses it. Exits 1 when a check fails."""
    from llmgw.server.doctor import Doctor, Verdict

    marks = {Verdict.OK: "[green]ok  [/]", Verdict.WARN: "[yellow]warn[/]", Verdict.FAIL: "[red]FAIL[/]"}
    checks = Doctor(data_dir or default_data_dir(), model, probe).run()
    for c in checks:
        render.console.print(f"{marks[c.verdict]} {c.name}: ", end="", highlight=False)
        render.console.print(c.detail, highlight=False, markup=False)
    failed = sum(c.verdict == Verdict.FAIL for c in checks)
    if failed:
        render.console.print(f"\n{failed} check(s) failed", highlight=False)
        raise typer.Exit(1)


def main() -> None:
    app()
