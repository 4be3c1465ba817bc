"""Serve jobs: fetch a model's file, size it, add it to the catalog, and let the keeper place it.

States: queued → fetching → adding → running, or failed / cancelled / gave_way. Jobs are stored
rows: any server takes a job (and a cancel), only the leader runs them, with fenced writes, and a
new leader resumes the unfinished ones (the download resumes where it stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from llmgw.control.catalog import CatalogService
from llmgw.control.sizing import estimate
from llmgw.core import audit, tracing
from llmgw.core.clock import Clock
from llmgw.core.errors import Conflict, LlmgwError, Retryable, StaleEpoch
from llmgw.core.ids import new_id
from llmgw.core.protocol.models import JobState, ServeJob, ServeRequest
from llmgw.core.tracing import NOOP_TRACER, Tracer
from llmgw.core.types import Engine, HubSource, LocalSource, Model, Profile
from llmgw.node.files import ModelFiles
from llmgw.node.gguf_info import read_info
from llmgw.store.lease_repo import Fence
from llmgw.store.store import Store

logger = logging.getLogger(__name__)

# How often fetch progress is written to the store (the in-memory copy is always current).
PROGRESS_EVERY_S = 1.0
# A cut-off download is retried this many times, resuming each time, before the job fails.
FETCH_ATTEMPTS = 5


class ServeJobs:
    """Takes, runs (on the leader), lists and cancels serve jobs; owns one task per job it runs."""

    def __init__(
        self,
        store: Store,
        files: ModelFiles,
        catalog: CatalogService,
        clock: Clock,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        fence: Callable[[], Fence | None] = lambda: None,
        on_submit: Callable[[], None] = lambda: None,
        tracer: Tracer = NOOP_TRACER,
    ) -> None:
        self._tracer = tracer
        self._store = store
        self._files = files
        self._catalog = catalog
        self._clock = clock
        self._sleep = sleep
        self._fence = fence
        self._on_submit = on_submit
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._live: dict[str, ServeJob] = {}
        # Jobs an operator cancelled here, and who (the audit log's `by`, None outside the API).
        self._cancelled: dict[str, str | None] = {}

    async def start(self, request: ServeRequest, fence: Fence | None = None) -> ServeJob:
        """Store a queued job for the leader to run (`fence`: the leader's own jobs, written only
        while it leads, and run at once)."""
        if isinstance(request.source, LocalSource):
            source = await self._catalog.local_source(request.source)
            request = request.model_copy(update={"source": source})
        job = ServeJob(id=new_id("job"), request=request, created_at=self._clock.now())
        await asyncio.to_thread(self._store.jobs.create, job, self._clock.now(), fence)
        logger.info("serve job %s: %s for %s", job.id, _what(request), request.by)
        if fence is not None:
            self._spawn(job)
        self._on_submit()
        return job

    async def jobs(self) -> list[ServeJob]:
        """Every job, with live progress for the running ones."""
        stored = await asyncio.to_thread(self._store.jobs.list)
        return [self._live.get(j.id, j) for j in stored]

    async def get(self, job_id: str) -> ServeJob:
        stored = await asyncio.to_thread(self._store.jobs.get, job_id)
        return self._live.get(job_id, stored)

    async def cancel(self, job_id: str) -> ServeJob:
        """Stop a job that has not finished; a finished one is left as it is."""
        job = await self.get(job_id)
        task = self._tasks.get(job_id)
        if job.state.finished or task is None:
            # Run by the leader elsewhere (or by nobody yet): the stored state says cancelled,
            # and the leader stops the job when it sees that.
            await asyncio.to_thread(self._store.jobs.cancel, job_id, self._clock.now(),
                                    "cancelled by an operator")
            return await self.get(job_id)
        self._cancelled[job_id] = audit.actor()
        task.cancel()
        await asyncio.wait({task})
        return await self.get(job_id)

    async def take_over(self) -> list[str]:
        """The leader's pass: run every stored job that has not finished and nobody here runs
        (submitted to any server, or left by a previous leader), and stop those another server
        cancelled. Returns the ids it started."""
        started = []
        for job in await asyncio.to_thread(self._store.jobs.list):
            task = self._tasks.get(job.id)
            if job.state.finished and task is not None and job.state == JobState.CANCELLED:
                task.cancel()  # already marked in the store, by whoever cancelled it
            elif not job.state.finished and task is None:
                if job.state != JobState.QUEUED:
                    logger.info("serve job %s: resuming (%s)", job.id, job.state.value)
                self._spawn(job)
                started.append(job.id)
        return started

    async def close(self) -> None:
        """Stop running jobs without marking them: the next start resumes them."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def _spawn(self, job: ServeJob) -> None:
        self._live[job.id] = job
        task = asyncio.create_task(self._run(job), name=f"serve-{job.id}")
        self._tasks[job.id] = task
        task.add_done_callback(lambda _t: self._forget(job.id))

    def _forget(self, job_id: str) -> None:
        self._tasks.pop(job_id, None)
        self._live.pop(job_id, None)
        self._cancelled.pop(job_id, None)

    async def _run(self, job: ServeJob) -> None:
        span = self._tracer.root("serve job", attributes={
            "llmgw.job": job.id, "gen_ai.request.model": job.request.name,
            "llmgw.job.resumed_from": job.state.value})
        with tracing.active(span):
            await self._traced_run(job)
            span.set("llmgw.job.state", self._live.get(job.id, job).state.value)

    async def _traced_run(self, job: ServeJob) -> None:
        try:
            path = await self._fetch(job)
            warning = await asyncio.to_thread(self._unverified, job.request)
            if warning:
                logger.warning("serve job %s: %s", job.id, warning)
            job = await self._set(job, JobState.ADDING, **({"warning": warning} if warning else {}))
            await self._add(job, path)
        except asyncio.CancelledError:
            if job.id in self._cancelled:
                # Written as the operator who cancelled it: the audit log has it under them.
                by = self._cancelled[job.id]
                with audit.acting(by) if by is not None else contextlib.nullcontext():
                    await asyncio.shield(self._set(job, JobState.CANCELLED,
                                                   error="cancelled by an operator"))
            raise
        except StaleEpoch:
            # Deposed mid-job: the job stays as stored, and the next leader resumes it.
            logger.info("serve job %s: no longer the leader; the next leader resumes it", job.id)
        except LlmgwError as exc:
            logger.warning("serve job %s failed: %s", job.id, exc.message)
            await self._set(job, JobState.FAILED, error=exc.message)
        except Exception as exc:
            logger.exception("serve job %s failed", job.id)
            await self._set(job, JobState.FAILED, error=f"internal error: {type(exc).__name__}")

    async def _fetch(self, job: ServeJob) -> Path:
        src = job.request.source
        if isinstance(src, LocalSource):
            return Path(src.path)
        job = await self._set(job, JobState.FETCHING)
        tracker = _Progress(self._clock.monotonic, lambda d, t, r: self._publish(job.id, d, t, r),
                            lambda d, t, r: self._persist(job.id, d, t, r))
        try:
            for attempt in range(1, FETCH_ATTEMPTS + 1):
                try:
                    path = await self._files.fetch(src, tracker.update)
                    break
                except Retryable as exc:
                    if attempt == FETCH_ATTEMPTS:
                        raise
                    delay = min(2.0 ** (attempt - 1), 30.0)
                    logger.warning("serve job %s: %s; retrying in %.0fs", job.id, exc.message, delay)
                    await self._sleep(delay)
        finally:
            await tracker.close()
        return path

    def _unverified(self, req: ServeRequest) -> str | None:
        """Why the fetched file is unverified, or None (verified, or a local file)."""
        src = req.source
        if isinstance(src, HubSource) and self._files.unverified(src):
            return (f"{src.repo}/{src.file}@{src.revision} was not verified: the Hub published "
                    "no SHA-256 for it (only its size was checked)")
        return None

    async def _add(self, job: ServeJob, path: Path) -> None:
        req = job.request
        info = await asyncio.to_thread(read_info, path)
        profiles = req.profiles or [_default_profile(req)]
        sized: list[Profile] = []
        notes: list[str] = []
        for p in profiles:
            est = estimate(info, p.args, parallel_default=1)
            notes.append(f"{p.name}: {est.describe()}")
            explicit = req.memory_gb if not req.profiles else p.min_memory_gb
            update: dict[str, float] = {"min_memory_gb": explicit or est.total_gb}
            if p.gpu and p.gpu_memory_gb is None:
                update["gpu_memory_gb"] = est.on_devices(p.gpu_layers)
            sized.append(p.model_copy(update=update))
        model = Model(name=req.name, source=req.source, profiles=sized, scaling=req.scaling,
                      guard=req.guard)
        try:
            await self._catalog.add(model, req.by)
        except Conflict:
            if req.if_absent:
                # Somebody added it while this job fetched: theirs stays, exactly as it is.
                await self._set(job, JobState.GAVE_WAY, estimate="; ".join(notes),
                                error=f"{req.name} was added meanwhile; that entry was kept")
                return
            raise
        await self._set(job, JobState.RUNNING, estimate="; ".join(notes))

    async def _set(self, job: ServeJob, state: JobState, **fields: Any) -> ServeJob:
        job = job.model_copy(update={"state": state, **fields, "updated_at": self._clock.now()})
        if job.id in self._tasks:
            self._live[job.id] = job
        await asyncio.to_thread(self._store.jobs.update, job.id, self._clock.now(), self._fence(),
                                state=state, **fields)
        logger.info("serve job %s: %s%s", job.id, state.value,
                    f" ({fields['error']})" if fields.get("error") else "")
        return job

    def _publish(self, job_id: str, done: int, total: int, rate: float) -> None:
        live = self._live.get(job_id)
        if live is not None:
            self._live[job_id] = live.model_copy(
                update={"bytes_done": done, "bytes_total": total, "rate_bps": rate}
            )

    async def _persist(self, job_id: str, done: int, total: int, rate: float) -> None:
        await asyncio.to_thread(self._store.jobs.update, job_id, self._clock.now(), self._fence(),
                                bytes_done=done, bytes_total=total, rate_bps=rate)


class _Progress:
    """A download's bytes and rate: published at once, persisted at most once a second."""

    def __init__(
        self,
        monotonic: Callable[[], float],
        publish: Callable[[int, int, float], None],
        persist: Callable[[int, int, float], Coroutine[Any, Any, None]],
    ) -> None:
        self._monotonic = monotonic
        self._publish = publish
        self._persist = persist
        self._since = (monotonic(), 0)
        self._written = float("-inf")
        self._writing: asyncio.Task[None] | None = None
        self.done = self.total = 0
        self.rate = 0.0

    def update(self, done: int, total: int) -> None:
        now = self._monotonic()
        t0, d0 = self._since
        if done < d0 or t0 == now:
            self._since = (now, done)  # a restart from scratch, or the first report
        else:
            self.rate = (done - d0) / (now - t0)
        self.done, self.total = done, total
        self._publish(done, total, self.rate)
        busy = self._writing is not None and not self._writing.done()
        if now - self._written >= PROGRESS_EVERY_S and not busy:
            self._written = now
            self._writing = asyncio.create_task(self._persist(done, total, self.rate))

    async def close(self) -> None:
        """Wait for the write in flight, then write the last figures."""
        if self._writing is not None:
            await asyncio.wait({self._writing})
        await self._persist(self.done, self.total, self.rate)


def _default_profile(req: ServeRequest) -> Profile:
    args = ["--ctx-size", str(req.ctx_size), *req.args]
    return Profile(name="cpu", engine=Engine.LLAMACPP, args=args, cpu_cores=req.cores,
                   min_memory_gb=req.memory_gb or 1.0)


def _what(req: ServeRequest) -> str:
    src = req.source
    where = f"{src.repo}/{src.file}@{src.revision}" if isinstance(src, HubSource) else src.path
    return f"serve {req.name} from {where}"
