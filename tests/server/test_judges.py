"""`ctl guard judge status` on any server: the judge keeper runs on the leader only."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from llmgw.control.catalog import CatalogService
from llmgw.control.judge_keeper import JUDGE_GRACE
from llmgw.control.judge_loop import JudgeKeeper
from llmgw.control.serve_jobs import ServeJobs
from llmgw.core.clock import FakeClock
from llmgw.core.guard import Policy
from llmgw.core.judges import DEFAULT_JUDGE
from llmgw.node import hardware
from llmgw.node.files import ModelFiles
from llmgw.node.gpus import GpuFinder
from llmgw.server import judges
from llmgw.store.store import Store
from tests.factories import NOW
from tests.fakes.nvml import ERROR_DRIVER_NOT_LOADED, H200, FakeNvml

JUDGE = "qwen3guard-4b"  # known, not installed by init
GPU_JUDGE = "qwen3guard-8b"  # known, runs on a GPU


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    sqlite_store.guard.set_switch("guard_enabled", True)
    sqlite_store.guard.set_policy(Policy(name="p", judges=[JUDGE]), "operator", NOW)
    return sqlite_store


async def nothing() -> None:
    return None


def server_keeper(store: Store, tmp_path: Path, clock: FakeClock, server_id: str) -> JudgeKeeper:
    catalog = CatalogService(store, clock)
    jobs = ServeJobs(store, ModelFiles(tmp_path / server_id), catalog, clock)
    return judges.keeper(store, jobs, catalog, clock, JUDGE_GRACE.total_seconds(), nothing,
                         lambda: None, server_id)


async def test_a_follower_shows_the_leaders_keeper(store: Store, tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    leader = server_keeper(store, tmp_path, clock, "server-a")
    follower = server_keeper(store, tmp_path, clock, "server-b")
    await leader.tick()
    clock.advance(60)

    follower_status = judges.status(store, follower, clock, lambda: False, "server-b")
    leader_status = judges.status(store, leader, clock, lambda: True, "server-a")

    [row] = [r for r in await follower_status() if r.judge == JUDGE]
    assert row.keeper == "in grace until 2026-01-01T00:10:00+00:00"
    assert row.keeper_server == "server-a"
    assert [r for r in await leader_status() if r.judge == JUDGE] == [row]


async def test_before_the_leader_looked_a_follower_says_so(store: Store, tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    follower = server_keeper(store, tmp_path, clock, "server-b")

    [row] = [r for r in await judges.status(store, follower, clock, lambda: False, "server-b")()
             if r.judge == JUDGE]

    assert row.keeper == "waiting for the keeper's first look" and row.keeper_server is None


@pytest.mark.parametrize(("nvml", "served", "gpu_class"), [
    # No NVIDIA driver on the machine: detection finds no GPU, the default judge stands in.
    (FakeNvml([H200], init_error=ERROR_DRIVER_NOT_LOADED), DEFAULT_JUDGE, None),
    # The H200 is found: the GPU judge is kept, on it.
    (FakeNvml([H200]), GPU_JUDGE, "h200"),
])
async def test_a_gpu_judge_runs_on_a_found_gpu_and_without_one_the_default_judge_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, nvml: FakeNvml, served: str,
    gpu_class: str | None,
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'llmgw.db'}")
    store.guard.set_switch("guard_enabled", True)
    store.guard.set_policy(Policy(name="p", judges=[GPU_JUDGE]), "operator", NOW)
    clock = FakeClock(NOW)
    store.nodes.upsert(hardware.probe("local", gpus=GpuFinder(nvml)), clock.now())
    keeper = server_keeper(store, tmp_path, clock, "server-a")
    caplog.set_level(logging.INFO)

    await keeper.tick()
    clock.advance(JUDGE_GRACE.total_seconds() + 1)
    await keeper.tick()
    clock.advance(60)
    await keeper.tick()

    [job] = store.jobs.list()
    [profile] = job.request.profiles
    assert (job.request.name, profile.gpu_class) == (served, gpu_class)
    instead = [r for r in caplog.records if "is used instead" in r.getMessage()]
    assert len(instead) == (1 if served == DEFAULT_JUDGE else 0)
    store.close()
