"""`llmgw node run`: a node agent on its own machine, joined to the servers with a token."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import tomllib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llmgw.core.clock import SystemClock
from llmgw.core.errors import ConfigError
from llmgw.core.names import check_gpu_class
from llmgw.core.types import Node
from llmgw.guard.judge_client import warm_up as judge_warm_up
from llmgw.node import hardware
from llmgw.node.agent import AgentConfig, NodeAgent
from llmgw.node.engine_compat import FILE_NAME as COMPAT_FILE
from llmgw.node.engine_compat import EngineCompat
from llmgw.node.files import ModelFiles
from llmgw.node.gpus import GpuFinder, GpuRules, declared
from llmgw.node.mcp_runs import McpRunConfig, McpRunner
from llmgw.node.remote import ServerLink
from llmgw.node.supervisor import Status

logger = logging.getLogger(__name__)


class NodeConfig(BaseModel):
    """`llmgw node run --config FILE`: a TOML file with a `[node]` table of the same options
    (flags given on the command line win; labels and GPUs are merged, flags on top)."""

    # The fields' docstrings are their descriptions: the configuration reference is made of them.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    server: list[str] = Field(default_factory=list)
    """The servers' URLs, tried in turn (`--server`, `LLMGW_SERVER`)."""
    token: str | None = None
    """The join token from `llmgw ctl node token create` (`--token`, `LLMGW_NODE_TOKEN`); keep
    the file readable by the agent's user only."""
    node_id: str | None = None
    """This node's id (`--node-id`); default: the hostname."""
    address: str | None = None
    """The address engines listen on and servers reach (`--address`); default: the one that
    routes to the first server."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Labels for node selectors, as a table of KEY = "VALUE" (`--label`, merged, the flags on
    top)."""
    gpus: dict[str, int] = Field(default_factory=dict)
    """GPUs to offer, as a table of CLASS = COUNT (`--gpu`, merged, the flags on top): declared
    by hand, they replace the GPUs found through NVIDIA's driver."""
    gpu_classes: dict[str, str] = Field(default_factory=dict)
    """Classes to offer found GPUs as, as a table of FOUND = CLASS (`--gpu-class`, merged, the
    flags on top): `a100-80gb = "a100"` offers every A100 80GB as an `a100`."""
    hide_gpus: list[str] = Field(default_factory=list)
    """Found GPUs never to offer, by index (`"0"`) or UUID (`"GPU-…"`) as `nvidia-smi -L` shows
    them (`--hide-gpu`, added to the flags')."""
    cores: int | None = Field(default=None, ge=0)
    """Cores to offer (`--cores`); default: probed."""
    memory_gb: float | None = Field(default=None, ge=0)
    """Memory to offer, in GB (`--memory-gb`); default: probed."""
    data_dir: Path | None = None
    """Where model files and engine logs go (`--data-dir`); default: `node/` in the data
    directory."""
    interval_s: float | None = Field(default=None, gt=0)
    """Seconds between reports to the servers, the heartbeat (`--interval`); default 5."""
    engine_commands: list[str] = Field(default_factory=list)
    """Programs `command` engines may run here (`--engine-command`, merged), by name on PATH or
    absolute path, as a profile's command gives them; empty: none. Whoever holds an admin key
    runs what a profile says with an allowed program: allow engines, not shells or interpreters
    you would not hand out."""
    mcp_commands: list[str] = Field(default_factory=list)
    """Programs stdio MCP servers may run here (`--mcp-command`, merged), by name on PATH or
    absolute path, as a server's command gives them; empty: none. Whoever holds an admin key
    runs what a stdio server's command says with an allowed program (`npx` runs any package):
    allow only what you would let an admin run on this machine."""


    @field_validator("gpus", "gpu_classes")
    @classmethod
    def _classes(cls, value: dict[str, object]) -> dict[str, object]:
        for name in (*value, *(v for v in value.values() if isinstance(v, str))):
            check_gpu_class(name)
        return value


def load_config(path: Path) -> NodeConfig:
    """Read a node config file; ConfigError saying what is wrong with it."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    try:
        return NodeConfig.model_validate(raw.get("node", {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: [node] {where}: {first['msg']}") from exc


@dataclass
class NodeOptions:
    """What `llmgw node run` was told; hardware left None is probed."""

    servers: list[str]
    token: str
    data_dir: Path
    node_id: str = field(default_factory=socket.gethostname)
    address: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    cores: int | None = None
    memory_gb: float | None = None
    gpus: dict[str, int] = field(default_factory=dict)
    gpu_rules: GpuRules = field(default_factory=GpuRules)
    interval_s: float = 5.0
    start_timeout_s: float = 120.0
    engine_commands: list[str] = field(default_factory=list)
    mcp_commands: list[str] = field(default_factory=list)


def reaching_address(server_url: str) -> str:
    """The local address this machine uses to reach `server_url`: the one servers can reach
    back, so engines listen there (a UDP connect sends nothing; it only picks the route)."""
    parts = urlsplit(server_url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 80
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, port))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def describe(opts: NodeOptions, gpus: GpuFinder) -> Node:
    """This node as it registers: probed hardware, with what the flags declare on top (GPUs
    declared with `--gpu` replace those `gpus` finds)."""
    address = opts.address or reaching_address(opts.servers[0])
    probed = hardware.probe(opts.node_id, address, None if opts.gpus else gpus)
    if opts.gpus:
        probed = hardware.with_gpus(probed, declared(opts.gpus))
    return probed.model_copy(update={
        "labels": {**probed.labels, **opts.labels},
        "cores": opts.cores if opts.cores is not None else probed.cores,
        "memory_gb": opts.memory_gb if opts.memory_gb is not None else probed.memory_gb,
    })


def reporting(node: Node, opts: NodeOptions, gpus: GpuFinder) -> Callable[[], Node]:
    """The node as each report gives it: its GPUs looked at again (memory, utilisation,
    temperature; a lost one dropped), unless `--gpu` declared them."""
    if opts.gpus:
        return lambda: node
    return lambda: hardware.with_gpus(node, gpus.look().gpus)


def agent_id(data_dir: Path) -> str:
    """This agent's id, made once and kept in its data dir: the same across restarts, so a
    restarted agent is not taken for a second machine claiming its node id."""
    path = data_dir / "agent-id"
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        data_dir.mkdir(parents=True, exist_ok=True)
        made = "agent-" + uuid.uuid4().hex
        path.write_text(made + "\n", encoding="utf-8")
        return made


async def run_node(opts: NodeOptions) -> None:
    """Run the agent until SIGINT or SIGTERM; then stop every engine it started."""
    gpus = GpuFinder.here(opts.gpu_rules)
    node = describe(opts, gpus)
    link = ServerLink(opts.servers, opts.token, reporting(node, opts, gpus),
                      agent=agent_id(opts.data_dir))
    agent: NodeAgent

    async def report(replica_id: str, status: Status) -> None:
        await link.report(replica_id, status)
        agent.wake.set()  # a new state reaches the servers now, not at the next heartbeat

    async def report_mcp(server: str, status: Status) -> None:
        await link.report_mcp(server, status)
        agent.wake.set()

    log_dir = opts.data_dir / "logs"
    mcp = McpRunner(
        McpRunConfig(host=node.address, log_dir=log_dir, engine_key=lambda: link.engine_key,
                     commands=frozenset(opts.mcp_commands)),
        servers=link.mcp_servers, report=report_mcp, forget=link.forget_mcp,
        clock=SystemClock(),
    )
    agent = NodeAgent(
        AgentConfig(
            node_id=node.id,
            host=node.address,
            log_dir=log_dir,
            start_timeout_s=opts.start_timeout_s,
            files=ModelFiles(opts.data_dir / "models"),
            engine_key=lambda: link.engine_key,
            compat=EngineCompat(opts.data_dir / COMPAT_FILE),
            engine_commands=frozenset(opts.engine_commands),
            # A node has no store: judges enabled by repo are warmed in the default format.
            warm_up=judge_warm_up(),
            devices=lambda: node.devices,
        ),
        assignments=link.assignments,
        report=report,
        forget=link.forget,
        clock=SystemClock(),
        mcp=mcp,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await link.start()
    logger.info("node %s (%s, %d cores, %.1f GB, GPUs %s, labels %s) joining %s", node.id,
                node.address, node.cores, node.memory_gb, node.gpus or "none", node.labels,
                ", ".join(opts.servers))
    task = asyncio.create_task(agent.run(opts.interval_s), name="node-agent")
    watch = asyncio.create_task(link.watch(agent.wake.set), name="node-watch")
    try:
        await stop.wait()
        logger.info("stopping: engines get SIGTERM, then SIGKILL")
    finally:
        watch.cancel()
        task.cancel()
        await asyncio.wait({task, watch})
        await link.close()
