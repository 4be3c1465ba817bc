"""The node agent: runs the replicas assigned to this node and reports their state.

`plan` decides which supervisors to start and stop from plain data; `NodeAgent` applies it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from llmgw.core.clock import Clock
from llmgw.core.errors import LlmgwError, ServerUnreachable
from llmgw.core.loops import every
from llmgw.core.types import Engine, HubSource, LocalSource, Model, Replica, ReplicaState
from llmgw.engines import llamacpp
from llmgw.node.files import ModelFiles
from llmgw.node.supervisor import Launch, Reporter, Status, Supervisor

logger = logging.getLogger(__name__)


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


class NodeAgent:
    """Owns one supervisor task per running replica."""

    def __init__(
        self,
        config: AgentConfig,
        assignments: Callable[[], Awaitable[list[Assignment]]],
        report: Reporter,
        forget: Callable[[str], Awaitable[None]],
        clock: Clock,
    ) -> None:
        self._cfg = config
        self._assignments = assignments
        self._report = report
        self._forget = forget
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.wake = asyncio.Event()

    @property
    def running(self) -> set[str]:
        return set(self._tasks)

    async def run(self, interval_s: float) -> None:
        """Reconcile every `interval_s`, or at once when woken."""
        try:
            await every(interval_s, self.wake, self.reconcile, "node agent", logger)
        finally:
            await self.stop_all()

    async def reconcile(self) -> None:
        """Read assignments once and apply the plan."""
        for rid, task in list(self._tasks.items()):
            if task.done():  # a supervisor only ends on an error it could not handle
                del self._tasks[rid]
                if not task.cancelled() and task.exception() is not None:
                    logger.error("supervisor of %s died: %r", rid, task.exception())
        try:
            assigned = await self._assignments()
        except ServerUnreachable:
            return  # said once by the link; the replicas keep running as they are
        actions = plan(assigned, self.running)
        for rid in actions.stop:
            await self._stop(rid)
        for rid in actions.forget:
            await self._forget(rid)
        for a in actions.start:
            await self._start(a)

    async def _start(self, a: Assignment) -> None:
        launch = self._launch(a)
        if isinstance(launch, str):
            await self._report(a.replica.id, Status(ReplicaState.FAILED, last_error=launch))
            return
        sup = Supervisor(launch, self._report, self._clock.monotonic, restarts=a.replica.restarts)
        assert a.model is not None
        src = a.model.source
        run = self._fetch_then(a.replica.id, src, sup) if isinstance(src, HubSource) else sup.run()
        self._tasks[a.replica.id] = asyncio.create_task(run, name=f"replica-{a.replica.id}")

    async def _fetch_then(self, rid: str, src: HubSource, sup: Supervisor) -> None:
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
                return  # the next reconcile tries again
        await sup.run()

    def _launch(self, a: Assignment) -> Launch | str:
        """How to run the replica, or why it cannot run here."""
        if a.model is None:
            return f"model {a.replica.model} is not in the catalog"
        profile = next((p for p in a.model.profiles if p.name == a.replica.profile), None)
        if profile is None or profile.engine != Engine.LLAMACPP:
            return f"profile {a.replica.profile!r} is missing or not a local engine"
        src = a.model.source
        try:
            if isinstance(src, LocalSource):
                path = src.path
            elif isinstance(src, HubSource) and self._cfg.files is not None:
                path = str(self._cfg.files.path_for(src))
            else:
                return f"this node cannot run a {src.kind} source"
            binary = self._cfg.llama_server()
        except LlmgwError as exc:
            return exc.message
        host, alias = self._cfg.host, a.model.name
        key = self._cfg.engine_key()
        return Launch(
            replica_id=a.replica.id,
            command=lambda port: llamacpp.argv(binary, path, profile, host, port, alias),
            host=host,
            log_path=self._cfg.log_dir / f"{a.replica.id}.log",
            health_path=llamacpp.HEALTH_PATH,
            start_timeout_s=self._cfg.start_timeout_s,
            backoff_base_s=self._cfg.backoff_base_s,
            env={llamacpp.API_KEY_ENV: key} if key else {},
        )

    async def _stop(self, rid: str) -> None:
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
