"""The node agent: runs the replicas assigned to this node and reports their state.

`plan` decides which supervisors to start and stop from plain data; `NodeAgent` applies it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from llmgw.core.clock import Clock
from llmgw.core.devices import named
from llmgw.core.errors import LlmgwError, ServerUnreachable
from llmgw.core.loops import every
from llmgw.core.types import (
    Engine,
    Gpu,
    HubSource,
    LocalSource,
    Model,
    Profile,
    Replica,
    ReplicaState,
)
from llmgw.engines import command, llamacpp
from llmgw.engines.crashes import NO_REPACK, Exit
from llmgw.node import engine_devices
from llmgw.node.engine_compat import EngineCompat
from llmgw.node.files import ModelFiles
from llmgw.node.mcp_runs import McpRunner
from llmgw.node.supervisor import (
    MAX_FAILURES,
    WARM_UP_S,
    Launch,
    Reporter,
    Status,
    Supervisor,
    WarmUp,
)

logger = logging.getLogger(__name__)

# A guard model's warm-up: given the model and its replica's slots (None: its profile does not
# say), the `/completion` bodies of one judgment per slot, sent before the replica is reported
# ready (`supervisor.WarmUp`). The guard layer renders them: the node knows no judge's prompt.
WarmBodies = Callable[[Model, int | None], Awaitable[list[bytes]]]


@dataclass(frozen=True)
class Assignment:
    """A replica placed on this node, with the catalog entry it runs."""

    replica: Replica
    # None once the model left the catalog: the replica is only there to be stopped.
    model: Model | None


@dataclass(frozen=True)
class AgentPlan:
    start: list[Assignment] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    # Replicas marked stopping whose process is gone: their rows can go.
    forget: list[str] = field(default_factory=list)


def plan(assigned: list[Assignment], running: set[str]) -> AgentPlan:
    """Start what is assigned and not running; stop what runs and is no longer wanted."""
    wanted = {a.replica.id for a in assigned if a.replica.state != ReplicaState.STOPPING}
    return AgentPlan(
        start=[a for a in assigned if a.replica.id in wanted and a.replica.id not in running],
        stop=sorted(r for r in running if r not in wanted),
        forget=[
            a.replica.id
            for a in assigned
            if a.replica.state == ReplicaState.STOPPING and a.replica.id not in running
        ],
    )


@dataclass
class AgentConfig:
    node_id: str
    host: str
    log_dir: Path
    start_timeout_s: float = 120.0
    llama_server: Callable[[], str] = llamacpp.find_binary
    backoff_base_s: float = 1.0
    files: ModelFiles | None = None
    # The engine key the servers send; engines refuse requests without it. None: no key.
    engine_key: Callable[[], str | None] = lambda: None
    # What this host needs to run the engine (`--no-repack` after a SIGILL); None: learn nothing.
    compat: EngineCompat | None = None
    max_failures: int = MAX_FAILURES
    # Judgments a guard model's replica answers before it is ready; None: none.
    warm_up: WarmBodies | None = None
    warm_up_timeout_s: float = WARM_UP_S
    # This node's GPUs as last found: a replica's devices' memory sets its split across them.
    devices: Callable[[], list[Gpu]] = list
    # The programs `command` engines may run on this node (names or absolute paths, as a
    # profile's command gives them); empty: none.
    engine_commands: frozenset[str] = frozenset()


def fingerprint(a: Assignment) -> str:
    """What a replica runs: its model's source and its profile. A replica given up on starts
    again once this changes."""
    if a.model is None:
        return ""
    profile = next((p for p in a.model.profiles if p.name == a.replica.profile), None)
    text = a.model.source.model_dump_json() + (profile.model_dump_json() if profile else "")
    return hashlib.sha256(text.encode()).hexdigest()


class NodeAgent:
    """Owns one supervisor task per running replica."""

    def __init__(
        self,
        config: AgentConfig,
        assignments: Callable[[], Awaitable[list[Assignment]]],
        report: Reporter,
        forget: Callable[[str], Awaitable[None]],
        clock: Clock,
        mcp: McpRunner | None = None,
    ) -> None:
        self._cfg = config
        # The stdio MCP servers this node runs, reconciled on the same passes.
        self._mcp = mcp
        self._assignments = assignments
        self._report = report
        self._forget = forget
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[bool]] = {}
        # Replicas whose supervisor gave up on a crash loop, with what they ran: they stay
        # failed (no process, not restarted) until that changes.
        self._gave_up: dict[str, str] = {}
        self._running_as: dict[str, str] = {}
        self.wake = asyncio.Event()

    @property
    def running(self) -> set[str]:
        """Replicas whose supervisor runs (one that ended is reaped at the next reconcile)."""
        return {rid for rid, task in self._tasks.items() if not task.done()}

    async def run(self, interval_s: float) -> None:
        """Reconcile every `interval_s`, or at once when woken."""
        try:
            await every(interval_s, self.wake, self.reconcile, "node agent", logger)
        finally:
            await self.stop_all()
            if self._mcp is not None:
                await self._mcp.stop_all()

    async def reconcile(self) -> None:
        """Read assignments once and apply the plan."""
        try:
            assigned = await self._assignments()
        except ServerUnreachable:
            self._reap()
            return  # said once by the link; the replicas keep running as they are
        # After the read, with no await before the plan: a supervisor that gives up while the
        # assignments are read (its last report wakes this pass) is then either running or
        # given up, never neither, which the plan would take for a replica to start again.
        self._reap()
        now = {a.replica.id: fingerprint(a) for a in assigned}
        for rid, ran in list(self._gave_up.items()):
            if now.get(rid) != ran:
                del self._gave_up[rid]  # changed or gone: tried again, or forgotten
        actions = plan(assigned, self.running | set(self._gave_up))
        for rid in actions.stop:
            await self._stop(rid)
        for rid in actions.forget:
            await self._forget(rid)
        for a in actions.start:
            await self._start(a)
        if self._mcp is not None:
            await self._mcp.reconcile()

    def _reap(self) -> None:
        """Take the supervisors that ended out of the running: one that gave up on a crash loop
        is kept as given up, with what it ran."""
        for rid, task in list(self._tasks.items()):
            if task.done():  # it gave up on a crash loop, or died of an error it could not handle
                del self._tasks[rid]
                ran = self._running_as.pop(rid, "")
                if not task.cancelled() and task.exception() is not None:
                    logger.error("supervisor of %s died: %r", rid, task.exception())
                elif not task.cancelled() and task.result():
                    self._gave_up[rid] = ran

    async def _start(self, a: Assignment) -> None:
        launch = await self._launch(a)
        if isinstance(launch, str):
            await self._report(a.replica.id, Status(ReplicaState.FAILED, last_error=launch))
            return
        launch = replace(launch, warm_up=await self._warm_up(a))
        sup = Supervisor(launch, self._report, self._clock.monotonic, restarts=a.replica.restarts)
        assert a.model is not None
        src = a.model.source
        run = (self._fetch_then(a.replica.id, src, sup) if isinstance(src, HubSource)
               else self._supervise(sup))
        self._tasks[a.replica.id] = asyncio.create_task(run, name=f"replica-{a.replica.id}")
        self._running_as[a.replica.id] = fingerprint(a)

    @staticmethod
    async def _supervise(sup: Supervisor) -> bool:
        """Run the supervisor; True when it gave up on a crash loop."""
        await sup.run()
        return sup.gave_up

    async def _fetch_then(self, rid: str, src: HubSource, sup: Supervisor) -> bool:
        """Fetch the model file onto this node (joining any download under way), then run."""
        files = self._cfg.files
        assert files is not None
        if files.cached(src) is None:
            await self._report(rid, Status(ReplicaState.STARTING, restarts=sup.restarts,
                                           last_error=f"fetching {src.repo}/{src.file}"))
            try:
                await files.fetch(src)
            except LlmgwError as exc:
                await self._report(rid, Status(ReplicaState.FAILED, restarts=sup.restarts,
                                               last_error=exc.message))
                return False  # the next reconcile tries again
        return await self._supervise(sup)

    async def _launch(self, a: Assignment) -> Launch | str:
        """How to run the replica, or why it cannot run here."""
        if a.model is None:
            return f"model {a.replica.model} is not in the catalog"
        profile = next((p for p in a.model.profiles if p.name == a.replica.profile), None)
        if profile is None or profile.engine not in (Engine.LLAMACPP, Engine.COMMAND):
            return f"profile {a.replica.profile!r} is missing or not a local engine"
        src = a.model.source
        try:
            if isinstance(src, LocalSource):
                path = src.path
            elif isinstance(src, HubSource) and self._cfg.files is not None:
                path = str(self._cfg.files.path_for(src))
            else:
                return f"this node cannot run a {src.kind} source"
            if profile.engine == Engine.COMMAND:
                return self._command_launch(a, profile, path)
            binary = self._cfg.llama_server()
        except LlmgwError as exc:
            return exc.message
        uuids = a.replica.devices
        if profile.gpu:
            # Said before a start, not found after one: a build without a GPU backend would
            # otherwise serve from the CPU as if all were well.
            why = await engine_devices.cannot_offload(binary, uuids)
            if why is not None:
                return why
        host, alias = self._cfg.host, a.model.name
        key = self._cfg.engine_key()
        compat = self._cfg.compat
        known = {g.uuid: g for g in self._cfg.devices()}
        gpus = [known[u] for u in uuids if u in known]
        if uuids:
            logger.info("replica %s runs on GPU(s) %s (%s)", a.replica.id, named(uuids, gpus),
                        ", ".join(uuids))

        def command(port: int) -> list[str]:
            extra = compat.extra_args(binary) if compat is not None else []
            return llamacpp.argv(binary, path, profile, host, port, alias, extra, gpus)

        return Launch(
            replica_id=a.replica.id,
            command=command,
            host=host,
            log_path=self._cfg.log_dir / f"{a.replica.id}.log",
            health_path=llamacpp.HEALTH_PATH,
            start_timeout_s=self._cfg.start_timeout_s,
            backoff_base_s=self._cfg.backoff_base_s,
            max_failures=self._cfg.max_failures,
            engine="llama-server",
            adapt=self._adapt(binary) if compat is not None else None,
            env={**llamacpp.gpu_env(profile, uuids), **({llamacpp.API_KEY_ENV: key} if key else {})},
            on_gpu=profile.gpu > 0,
        )

    def _command_launch(self, a: Assignment, profile: Profile, path: str) -> Launch:
        """How to run a `command` engine: the profile's argv and environment filled in,
        supervised as llama-server is; ConfigError unless this node allows its program."""
        command.allowed(profile, self._cfg.engine_commands)
        assert a.model is not None
        host, alias, key = self._cfg.host, a.model.name, self._cfg.engine_key()
        devices = tuple(a.replica.devices)

        def at(port: int) -> command.Replica:
            return command.Replica(path, alias, host, port, devices, profile.cpu_cores)

        return Launch(
            replica_id=a.replica.id,
            command=lambda port: command.argv(profile, at(port)),
            host=host,
            log_path=self._cfg.log_dir / f"{a.replica.id}.log",
            health_path=command.ready_path(profile),
            start_timeout_s=self._cfg.start_timeout_s,
            backoff_base_s=self._cfg.backoff_base_s,
            max_failures=self._cfg.max_failures,
            engine=command.name(profile),
            # The port is not in the environment (it is picked per start), so one serves all.
            env=command.env(profile, at(0), key),
            health_headers={"Authorization": f"Bearer {key}"} if key else {},
        )

    async def _warm_up(self, a: Assignment) -> WarmUp | None:
        """The judgments a guard model's replica answers before it is ready, one per slot."""
        model, render = a.model, self._cfg.warm_up
        if model is None or not model.guard or render is None:
            return None
        profile = next((p for p in model.profiles if p.name == a.replica.profile), None)
        try:
            bodies = await render(model, llamacpp.slots(profile) if profile else None)
        except LlmgwError as exc:
            logger.warning("replica %s: no warm-up (%s); its first judgments may be slow",
                           a.replica.id, exc.message)
            return None
        if not bodies:
            return None
        key = self._cfg.engine_key()
        return WarmUp(llamacpp.COMPLETION_PATH, tuple(bodies), self._cfg.warm_up_timeout_s,
                      {"Authorization": f"Bearer {key}"} if key else {})

    def _adapt(self, binary: str) -> Callable[[Exit, list[str]], str | None]:
        """The remedy for a start that died of SIGILL: `--no-repack`, learned for this binary on
        this host (see `node.engine_compat`)."""
        compat = self._cfg.compat
        assert compat is not None

        def adapt(ended: Exit, argv: list[str]) -> str | None:
            if not ended.illegal_instruction or NO_REPACK in argv:
                return None
            if compat.learn(binary, [NO_REPACK], "a start died with SIGILL (illegal instruction)",
                            self._clock.now()):
                logger.warning("llama-server %s died of an illegal instruction on this CPU; it "
                               "runs with %s on this host from now on", binary, NO_REPACK)
            return f"starting it again at once with {NO_REPACK}"

        return adapt

    async def _stop(self, rid: str) -> None:
        self._gave_up.pop(rid, None)
        self._running_as.pop(rid, None)
        task = self._tasks.pop(rid, None)
        if task is None:
            return
        task.cancel()
        # wait() rather than await: the task's CancelledError is its own, not ours to swallow.
        await asyncio.wait({task})
        logger.info("stopped replica %s", rid)

    async def stop_all(self) -> None:
        """Stop every engine (on shutdown); each is SIGTERMed, then SIGKILLed if it lingers."""
        await asyncio.gather(*(self._stop(rid) for rid in list(self._tasks)))
