"""The judge keeper's loop: reads the view, calls the pure `plan`, applies its actions and logs
each once (the plan and the judges' status are in `judge_keeper`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol

from llmgw.control.judge_keeper import (
    KeeperAction,
    KeeperState,
    KeeperView,
    Refit,
    Restart,
    Say,
    ServeJudge,
    Warn,
    judge_status,
    plan,
)
from llmgw.control.judge_scaling import Scale
from llmgw.core import tracing
from llmgw.core.clock import Clock
from llmgw.core.errors import LlmgwError
from llmgw.core.loops import every
from llmgw.core.protocol.models import ServeRequest
from llmgw.core.tracing import NOOP_TRACER, Tracer
from llmgw.core.types import HubSource, Profile

logger = logging.getLogger(__name__)


class LogLike(Protocol):
    """The part of a logger the keeper uses."""

    def info(self, msg: str, *args: object) -> None: ...

    def warning(self, msg: str, *args: object) -> None: ...

    def error(self, msg: str, *args: object) -> None: ...


class JudgeKeeper:
    """Applies the judge keeper's plan every `interval_s` (or when woken)."""

    def __init__(
        self,
        read: Callable[[], Awaitable[KeeperView]],
        serve: Callable[[ServeRequest], Awaitable[object]],
        refit: Callable[[str, list[Profile], str], Awaitable[object]],
        restart: Callable[[list[str]], Awaitable[object]],
        clock: Clock,
        log: LogLike = logger,
        publish: Callable[[KeeperState], Awaitable[object]] | None = None,
        on_scale: Callable[[], None] = lambda: None,
        tracer: Tracer = NOOP_TRACER,
    ) -> None:
        self.tracer = tracer
        self._read = read
        self._serve = serve
        self._refit = refit
        self._restart = restart
        self._clock = clock
        self._log = log
        # Writes the state where servers that do not lead read it for their judge status.
        self._publish = publish
        self._published: KeeperState | None = None
        # Wakes the replica keeper, which places the replicas a Scale asks for.
        self._on_scale = on_scale
        self._state = KeeperState()
        self.wake = asyncio.Event()

    @property
    def state(self) -> KeeperState:
        return self._state

    def targets(self) -> dict[str, int]:
        """The replicas each kept judge should have, as the last look decided."""
        return self._state.targets()

    async def tick(self) -> list[KeeperAction]:
        """One look: read, plan, apply; returns what it planned."""
        view = await self._read()
        actions, self._state = plan(self._state, view, self._clock.now())
        for action in actions:
            await self._apply(action)
        if any(isinstance(a, Scale) for a in actions):
            self._on_scale()
        if self._publish is not None and self._state != self._published:
            state = self._state
            try:
                await self._publish(state)
            except Exception as exc:  # the judges are kept all the same; published next look
                self._log.warning("judge keeper: could not publish its state: %s", _why(exc))
            else:
                self._published = state
        return actions

    async def status(self, state: KeeperState | None = None) -> dict[str, str]:
        """Per judge the keeper keeps, what it is doing about it: by this keeper's state, or by
        `state` (the leader's, read by a server that does not lead)."""
        view = await self._read()
        if state is not None:
            view = replace(view, leader=True)  # the leader's state, shown as the leader sees it
        return judge_status(state if state is not None else self._state, view, self._clock.now())

    async def run(self, interval_s: float) -> None:
        # Elected again: another leader may have published its state meanwhile.
        self._published = None
        await every(interval_s, self.wake, self._pass, "judge keeper", logger)

    async def _pass(self) -> None:
        """One look, traced (a pass that plans nothing is a short span: still worth seeing)."""
        with tracing.active(self.tracer.root("judge keeper pass")) as span:
            actions = await self.tick()
            if span.recording:
                span.set("llmgw.keeper.actions", [type(a).__name__ for a in actions])

    async def _apply(self, action: KeeperAction) -> None:
        match action:
            case ServeJudge(request=req):
                src = req.source
                where = f"{src.repo}/{src.file}" if isinstance(src, HubSource) else src.path
                try:
                    await self._serve(req)
                except Exception as exc:
                    # Asked for all the same: asked again after the retry period.
                    self._log.error("judge keeper: could not start serving judge %s: %s", req.name, _why(exc))
                    return
                self._log.info("judge keeper: serving judge %s from %s: a guard policy names it and "
                               "the catalog does not have it", req.name, where)
            case Scale(judge=judge, replicas=replicas, reason=reason):
                self._log.info("judge keeper: judge %s to %d replicas: %s", judge, replicas, reason)
            case Warn(judge=judge, message=message):
                self._log.warning("judge keeper: %s: %s", judge, message)
            case Say(judge=judge, message=message):
                self._log.info("judge keeper: %s: %s", judge, message)
            case Refit(model=model, profiles=profiles, by=by, restart=restart):
                try:
                    await self._refit(model, profiles, by)
                except Exception as exc:
                    self._log.warning("judge keeper: could not refit judge %s: %s", model, _why(exc))
                    self._state = self._state.forget_refit(model)
                    return
                p = profiles[0]
                failed = await self._restart_failed(model, restart) if restart else None
                if failed is not None:
                    self._log.warning("judge keeper: refitted judge %s, the one an earlier init "
                                      "installed, but could not restart it (%s): restarting it on "
                                      "the next look", model, failed)
                    return
                self._log.info("judge keeper: refitted judge %s, the one an earlier init installed: "
                               "%s GB, %d cores, %d replicas restarted",
                               model, p.min_memory_gb, p.cpu_cores, len(restart))
            case Restart(model=model, restart=restart):
                failed = await self._restart_failed(model, restart)
                if failed is not None:
                    self._log.warning("judge keeper: could not restart judge %s onto its refitted "
                                      "profile (%s): trying again on the next look", model, failed)
                    return
                self._log.info("judge keeper: restarted judge %s onto its refitted profile: %d "
                               "replicas", model, len(restart))

    async def _restart_failed(self, model: str, replicas: list[str]) -> str | None:
        """Restart `replicas`; on failure, why (and the next look tries again)."""
        try:
            await self._restart(replicas)
        except Exception as exc:
            self._state = self._state.restart_later(model)
            return _why(exc)
        return None


def _why(exc: Exception) -> str:
    return exc.message if isinstance(exc, LlmgwError) else f"{type(exc).__name__}: {exc}"
