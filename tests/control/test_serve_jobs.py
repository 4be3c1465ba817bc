"""Serve jobs with a real store and catalog; the file fetch is a stand-in only for timing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from llmgw.control.catalog import CatalogService
from llmgw.control.serve_jobs import ServeJobs
from llmgw.core import audit
from llmgw.core.audit import AuditKind
from llmgw.core.clock import SystemClock
from llmgw.core.errors import FetchFailed, FetchRefused, InvalidRequest
from llmgw.core.protocol.models import JobState, ServeJob, ServeRequest
from llmgw.core.types import HubSource, LocalSource, Model, Profile
from llmgw.node.files import Progress
from llmgw.store.lease_repo import fence
from llmgw.store.store import Store
from tests.factories import NOW
from tests.fakes.gguf_files import write_gguf


class GatedFiles:
    """Hands out one GGUF after `release` is set; can fail the first tries (fault injection)."""

    def __init__(self, path: Path, failures: list[Exception] | None = None) -> None:
        self.path = path
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.failures = failures or []
        self.calls = 0
        self.published_sha256 = True

    def unverified(self, src: HubSource) -> bool:
        return not self.published_sha256

    async def fetch(self, src: HubSource, progress: Progress | None = None) -> Path:
        self.calls += 1
        self.started.set()
        if self.failures:
            raise self.failures.pop(0)
        if progress:
            progress(10, 100)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        if progress:
            progress(100, 100)
        return self.path


def hub_request(name: str = "tiny", **over: object) -> ServeRequest:
    return ServeRequest.model_validate(
        {"name": name, "source": {"kind": "hf", "repo": "org/tiny-GGUF", "file": "tiny.gguf"},
         "by": "operator", **over}
    )


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    return write_gguf(tmp_path / "tiny.gguf")


async def no_sleep(_s: float) -> None:
    return None


@pytest.fixture
async def setup(store: Store, gguf: Path) -> AsyncIterator[tuple[ServeJobs, CatalogService, GatedFiles]]:
    files = GatedFiles(gguf)
    catalog = CatalogService(store, SystemClock(), model_roots=[gguf.parent])
    jobs = ServeJobs(store, files, catalog, SystemClock(), sleep=no_sleep)  # type: ignore[arg-type]
    yield jobs, catalog, files
    await jobs.close()


async def submitted(jobs: ServeJobs, request: ServeRequest) -> ServeJob:
    """A job taken by any server, then picked up by the leader's pass."""
    job = await jobs.start(request)
    assert (await jobs.get(job.id)).state == JobState.QUEUED  # nothing runs it before the leader
    await jobs.take_over()
    return job


async def finished(jobs: ServeJobs, job: ServeJob) -> ServeJob:
    """The job once it has finished (its task is awaited, not polled)."""
    task = jobs._tasks.get(job.id)
    if task is not None:
        await asyncio.wait({task})
    return await jobs.get(job.id)


Setup = tuple[ServeJobs, CatalogService, GatedFiles]
TTL = timedelta(seconds=15)


async def test_a_job_fetches_sizes_and_adds_the_model(setup: Setup) -> None:
    jobs, catalog, files = setup
    job = await submitted(jobs, hub_request(ctx_size=2048))
    await files.started.wait()
    assert (await jobs.get(job.id)).state == JobState.FETCHING
    assert (await jobs.get(job.id)).bytes_done == 10  # live progress
    files.release.set()
    done = await finished(jobs, job)
    assert done.state == JobState.RUNNING and done.bytes_done == 100
    model = await catalog.get("tiny")
    assert model.by == "operator"
    assert model.profiles[0].args[:2] == ["--ctx-size", "2048"]
    # No memory given: the profile holds the estimate, which includes the 8 GiB prompt cache.
    assert model.profiles[0].min_memory_gb > 8
    assert done.estimate and "prompt cache 8.00" in done.estimate


async def test_a_file_the_hub_published_no_sha256_for_is_said_unverified_in_the_job(
    setup: Setup, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    jobs, _catalog, files = setup
    files.published_sha256 = False
    files.release.set()

    done = await finished(jobs, await submitted(jobs, hub_request()))

    warning = "org/tiny-GGUF/tiny.gguf@main was not verified: the Hub published no SHA-256 for it"
    assert done.state == JobState.RUNNING and done.error is None
    assert done.warning and done.warning.startswith(warning)
    stored = store.jobs.get(done.id)  # what `ctl job show` reads through any server
    assert stored.warning == done.warning and stored.error is None
    assert any(warning in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


async def test_a_verified_file_leaves_no_warning(setup: Setup, store: Store) -> None:
    jobs, _catalog, files = setup
    files.release.set()
    done = await finished(jobs, await submitted(jobs, hub_request()))
    assert done.warning is None and store.jobs.get(done.id).warning is None


async def test_if_absent_gives_way_to_a_model_added_while_it_fetched(
    setup: tuple[ServeJobs, CatalogService, GatedFiles], gguf: Path
) -> None:
    jobs, catalog, files = setup
    job = await submitted(jobs, hub_request(if_absent=True, by="llmgw (a guard policy names it)"))
    await files.started.wait()
    operators = Model(name="tiny", source=LocalSource(path=str(gguf)),
                      profiles=[Profile(name="mine", cpu_cores=3, min_memory_gb=2)])
    await catalog.add(operators, "operator")
    files.release.set()
    done = await finished(jobs, job)
    assert done.state == JobState.GAVE_WAY
    kept = await catalog.get("tiny")
    assert kept.by == "operator" and kept.profiles[0].name == "mine"


async def test_without_if_absent_a_taken_name_fails_clearly(
    setup: tuple[ServeJobs, CatalogService, GatedFiles], gguf: Path
) -> None:
    jobs, catalog, files = setup
    await catalog.add(Model(name="tiny", source=LocalSource(path=str(gguf)),
                            profiles=[Profile(name="x")]), "operator")
    files.release.set()
    done = await finished(jobs, await submitted(jobs, hub_request()))
    assert done.state == JobState.FAILED and "already exists" in (done.error or "")


async def test_cancel_stops_the_fetch(setup: tuple[ServeJobs, CatalogService, GatedFiles]) -> None:
    jobs, catalog, files = setup
    job = await submitted(jobs, hub_request())
    await files.started.wait()
    cancelled = await jobs.cancel(job.id)
    assert cancelled.state == JobState.CANCELLED
    assert files.cancelled.is_set()
    assert [m.name for m in await catalog.models()] == []


async def test_a_cut_download_is_retried_and_a_refusal_is_not(store: Store, gguf: Path) -> None:
    catalog = CatalogService(store, SystemClock())
    flaky = GatedFiles(gguf, failures=[FetchFailed("cut"), FetchFailed("cut again")])
    flaky.release.set()
    jobs = ServeJobs(store, flaky, catalog, SystemClock(), sleep=no_sleep)  # type: ignore[arg-type]
    done = await finished(jobs, await submitted(jobs, hub_request()))
    assert done.state == JobState.RUNNING and flaky.calls == 3

    refused = GatedFiles(gguf, failures=[FetchRefused("org/x/y.gguf: file not found in the repo")])
    jobs = ServeJobs(store, refused, catalog, SystemClock(), sleep=no_sleep)  # type: ignore[arg-type]
    done = await finished(jobs, await submitted(jobs, hub_request(name="other")))
    assert done.state == JobState.FAILED and "file not found" in (done.error or "")
    assert refused.calls == 1


async def test_an_unfinished_job_resumes_after_a_restart(store: Store, gguf: Path) -> None:
    catalog = CatalogService(store, SystemClock())
    first = GatedFiles(gguf)
    jobs = ServeJobs(store, first, catalog, SystemClock(), sleep=no_sleep)  # type: ignore[arg-type]
    job = await submitted(jobs, hub_request())
    await first.started.wait()
    await jobs.close()  # a server stopping: the job stays "fetching" in the store
    assert (await jobs.get(job.id)).state == JobState.FETCHING

    second = GatedFiles(gguf)
    second.release.set()
    restarted = ServeJobs(store, second, catalog, SystemClock(), sleep=no_sleep)  # type: ignore[arg-type]
    assert await restarted.take_over() == [job.id]
    done = await finished(restarted, job)
    assert done.state == JobState.RUNNING
    assert (await catalog.get("tiny")).name == "tiny"


async def test_a_file_that_is_not_gguf_fails_the_job_saying_so(store: Store, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all")
    files = GatedFiles(bad)
    files.release.set()
    jobs = ServeJobs(store, files, CatalogService(store, SystemClock()), SystemClock(),  # type: ignore[arg-type]
                     sleep=no_sleep)
    done = await finished(jobs, await submitted(jobs, hub_request()))
    assert done.state == JobState.FAILED and "bad.gguf" in (done.error or "")


async def test_a_local_job_refuses_every_bad_path_alike_and_keeps_the_canonical_one(
    store: Store, tmp_path: Path
) -> None:
    root, outside = tmp_path / "models", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    real = write_gguf(root / "tiny.gguf")
    write_gguf(outside / "other.gguf")
    (tmp_path / "alias").symlink_to(root)
    catalog = CatalogService(store, SystemClock(), model_roots=[root])
    jobs = ServeJobs(store, GatedFiles(real), catalog, SystemClock(), sleep=no_sleep)  # type: ignore[arg-type]
    answers = set()
    for path in [str(outside / "other.gguf"), str(outside / "missing.gguf"), "/etc/passwd",
                 str(root / "missing.gguf"), "tiny.gguf"]:
        with pytest.raises(InvalidRequest) as caught:
            await submitted(jobs, ServeRequest(name="tiny", source=LocalSource(path=path)))
        answers.add((caught.value.message, caught.value.param))
    assert len(answers) == 1 and await jobs.jobs() == []

    job = await submitted(jobs, ServeRequest(name="tiny", source=LocalSource(path=str(tmp_path / "alias" /
                                                                                 "tiny.gguf"))))
    done = await finished(jobs, job)
    assert done.state == JobState.RUNNING
    assert (await catalog.get("tiny")).source == LocalSource(path=str(real.resolve()))


async def test_a_job_cancelled_on_another_server_is_stopped_by_the_leaders_next_pass(
    setup: Setup, store: Store
) -> None:
    leader, catalog, files = setup
    job = await submitted(leader, hub_request())
    await files.started.wait()
    follower = ServeJobs(store, files, catalog, SystemClock(), sleep=no_sleep)  # type: ignore[arg-type]
    assert (await follower.cancel(job.id)).state == JobState.CANCELLED
    await leader.take_over()
    done = await finished(leader, job)
    assert done.state == JobState.CANCELLED and done.error == "cancelled by an operator"
    assert files.cancelled.is_set()
    assert [m.name for m in await catalog.models()] == []


async def test_a_deposed_leaders_job_writes_nothing_and_the_next_leader_finishes_it(
    store: Store, gguf: Path
) -> None:
    catalog = CatalogService(store, SystemClock())
    first = store.leases.acquire("server-a", NOW, TTL)
    assert first is not None
    fenced_at = [NOW]
    gated = GatedFiles(gguf)
    old = ServeJobs(store, gated, catalog, SystemClock(), sleep=no_sleep,  # type: ignore[arg-type]
                    fence=lambda: fence("server-a", first.epoch, lambda: fenced_at[0]))
    job = await submitted(old, hub_request())
    await gated.started.wait()
    # server-a pauses past its lease; server-b is elected and resumes the job.
    fenced_at[0] = NOW + TTL * 2
    assert store.leases.acquire("server-b", fenced_at[0], TTL) is not None
    gated.release.set()
    assert (await finished(old, job)).state == JobState.FETCHING  # the old leader's end was refused
    assert [m.name for m in await catalog.models()] == []

    fresh = GatedFiles(gguf)
    fresh.release.set()
    new = ServeJobs(store, fresh, catalog, SystemClock(), sleep=no_sleep)  # type: ignore[arg-type]
    assert await new.take_over() == [job.id]
    assert (await finished(new, job)).state == JobState.RUNNING


async def test_a_cancel_is_in_the_audit_log_once_under_who_cancelled(setup: Setup, store: Store) -> None:
    leader, catalog, files = setup
    running = await submitted(leader, hub_request())
    await files.started.wait()
    with audit.acting("alice (sk-a…)"):
        assert (await leader.cancel(running.id)).state == JobState.CANCELLED  # run here
    follower = ServeJobs(store, files, catalog, SystemClock(), sleep=no_sleep)  # type: ignore[arg-type]
    queued = await follower.start(hub_request(name="other"))
    with audit.acting("bob (sk-b…)"):
        assert (await follower.cancel(queued.id)).state == JobState.CANCELLED  # run by nobody yet
    assert (await follower.cancel(queued.id)).state == JobState.CANCELLED  # finished: no change

    log = [(e.by, e.action, e.target, e.before, e.after)
           for e in reversed(store.audit.entries(kind=AuditKind.JOB))]
    assert log == [("alice (sk-a…)", "cancel", running.id, {"state": "fetching"}, {"state": "cancelled"}),
                   ("bob (sk-b…)", "cancel", queued.id, {"state": "queued"}, {"state": "cancelled"})]


async def test_a_gpu_profile_is_sized_for_its_devices_without_the_prompt_cache(setup: Setup) -> None:
    jobs, catalog, files = setup
    files.release.set()
    gpu = {"name": "gpu", "gpu": 1, "gpu_class": "h200", "args": ["--ctx-size", "2048"]}
    own = {**gpu, "name": "own", "gpu_memory_gb": 30.0}
    await finished(jobs, await submitted(jobs, hub_request(profiles=[gpu, own])))

    sized, kept = (await catalog.get("tiny")).profiles
    assert sized.gpu_memory_gb is not None and 0 < sized.gpu_memory_gb < 1
    assert kept.gpu_memory_gb == 30.0  # what the operator said stays
