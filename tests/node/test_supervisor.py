"""Engine supervision against the fake engine: ready, crash and restart, slow start, stubborn stop."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from llmgw.core.types import ReplicaState
from llmgw.engines.crashes import Exit
from llmgw.node.supervisor import Launch, Status, Supervisor, WarmUp, backoff_delay
from tests.fakes.fake_engine import CRASH_CODE, CRASH_LINE
from tests.fakes.processes import FAKE_ENGINE, eventually, fake_engine_argv, gone, kill_quietly

REPLICA = "rep-test"


class RecordingReporter:
    """Collects what the supervisor reports and lets a test await a particular report."""

    def __init__(self) -> None:
        self.statuses: list[Status] = []
        self.arrived = {state: asyncio.Event() for state in ReplicaState}
        self._changed = asyncio.Condition()

    async def __call__(self, replica_id: str, status: Status) -> None:
        assert replica_id == REPLICA
        async with self._changed:
            self.statuses.append(status)
            self.arrived[status.state].set()
            self._changed.notify_all()

    async def wait_for(self, want: Callable[[Status], bool], what: str, timeout_s: float = 20.0) -> Status:
        """The first report matching `want`, once it has arrived."""
        try:
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: any(want(s) for s in self.statuses))
        except TimeoutError:
            raise AssertionError(f"no report of {what} within {timeout_s}s; got {self.statuses}") from None
        return next(s for s in self.statuses if want(s))

    async def first(self, state: ReplicaState, timeout_s: float = 20.0) -> Status:
        """The first report of `state`, once one has arrived."""
        try:
            await asyncio.wait_for(self.arrived[state].wait(), timeout_s)
        except TimeoutError:
            raise AssertionError(
                f"no {state.value} report within {timeout_s}s; got {self.statuses}"
            ) from None
        return next(s for s in self.statuses if s.state == state)

    def states(self) -> list[ReplicaState]:
        return [s.state for s in self.statuses]


class FakeEngines:
    """Launches of the fake engine, each tagged so a leftover process can be found."""

    def __init__(self, log_dir: Path, tag: str) -> None:
        self.log_path = log_dir / f"{REPLICA}.log"
        self.tag = tag
        self.ports: list[int] = []

    def launch(self, mode: str, *extra: str, **over: Any) -> Launch:
        def command(port: int) -> list[str]:
            self.ports.append(port)
            return fake_engine_argv(port, mode, *extra, "--tag", self.tag)

        fields: dict[str, Any] = {"start_timeout_s": 20.0, "stop_grace_s": 5.0, "backoff_base_s": 0.05}
        fields.update(over)
        return Launch(replica_id=REPLICA, command=command, host="127.0.0.1", log_path=self.log_path, **fields)

    def worker_pids(self) -> list[int]:
        """Pids of the workers the engines started so far, oldest first (from the engine log)."""
        lines = self.log_path.read_text().splitlines()
        return [int(line.split()[-1]) for line in lines if line.startswith("worker pid ")]


def tagged(tag: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if tag in (p.info["cmdline"] or []) and not gone(p.pid):
            found.append(p)
    return found


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[FakeEngines]:
    """The fake engine, and a check that no engine process outlives the test."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    fakes = FakeEngines(tmp_path, f"fake-engine-{uuid.uuid4().hex}")
    yield fakes
    left = [p for p in me.children(recursive=True) if p.pid not in before and not gone(p.pid)]
    left += [p for p in tagged(fakes.tag) if p.pid not in {q.pid for q in left}]
    for p in left:
        kill_quietly(p.pid)
    assert not left, f"engine processes left behind: {[p.pid for p in left]}"


@pytest.fixture
def reporter() -> RecordingReporter:
    return RecordingReporter()


@asynccontextmanager
async def supervising(
    launch: Launch, reporter: RecordingReporter, restarts: int = 0
) -> AsyncIterator[asyncio.Task[None]]:
    """A running supervisor; leaving the block stops it the way the node agent does."""
    task = asyncio.create_task(Supervisor(launch, reporter, time.monotonic, restarts=restarts).run())
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.wait({task}, timeout=launch.stop_grace_s + 10)
        assert task.done(), "the supervisor did not finish after being cancelled"
        if not task.cancelled() and task.exception() is not None:
            raise AssertionError("the supervisor died") from task.exception()


def is_failed_with(restarts: int) -> Callable[[Status], bool]:
    return lambda s: s.state == ReplicaState.FAILED and s.restarts == restarts


# --- becoming ready ----------------------------------------------------------------------------


async def test_a_healthy_engine_is_reported_ready_with_its_endpoint_and_pid(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    async with supervising(engines.launch("ok"), reporter):
        ready = await reporter.first(ReplicaState.READY)

        [port] = engines.ports
        assert ready.endpoint == f"http://127.0.0.1:{port}/v1"
        assert ready.restarts == 0
        assert ready.last_error is None
        assert ready.pid is not None and not gone(ready.pid)
        assert str(FAKE_ENGINE) in psutil.Process(ready.pid).cmdline()
        # STARTING came first, naming the same process.
        assert reporter.states() == [ReplicaState.STARTING, ReplicaState.READY]
        assert reporter.statuses[0].pid == ready.pid
        # And the endpoint is where the engine really answers.
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/health") as resp:
            assert resp.status == 200

    assert gone(ready.pid)


async def test_the_start_log_line_cuts_a_chat_template_to_its_start_and_length(
    engines: FakeEngines, reporter: RecordingReporter, caplog: pytest.LogCaptureFixture
) -> None:
    template = "{%- for message in messages -%}\n{{ message['content'] }}\n{%- endfor -%}" * 40
    caplog.set_level("INFO", logger="llmgw.node.supervisor")
    async with supervising(engines.launch("ok", "--chat-template", template), reporter):
        await reporter.first(ReplicaState.READY)
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("starting replica")]
    assert template not in line and "\n" not in line
    assert f"…({len(template)} characters)" in line and "--chat-template {%- for message" in line
    assert len(line) < 600 and str(FAKE_ENGINE) in line  # paths stay whole


async def test_a_slow_engine_is_ready_once_its_health_check_passes(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    started = time.monotonic()
    async with supervising(engines.launch("slow", "--ready-after", "0.8"), reporter):
        await reporter.first(ReplicaState.READY)

    assert time.monotonic() - started >= 0.8
    assert reporter.states() == [ReplicaState.STARTING, ReplicaState.READY]


async def test_a_start_slower_than_the_timeout_is_failed_and_the_engine_killed(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    launch = engines.launch("slow", "--ready-after", "600", start_timeout_s=1.0)
    async with supervising(launch, reporter):
        failed = await reporter.first(ReplicaState.FAILED)
        starting = reporter.statuses[0]

        assert failed.last_error is not None
        assert "did not become healthy within 1s" in failed.last_error
        assert failed.restarts == 1
        assert starting.pid is not None and gone(starting.pid)
    assert ReplicaState.READY not in reporter.states()


# --- warming up --------------------------------------------------------------------------------

KEY = "engine-key-test"


def warm_up(timeout_s: float = 20.0) -> WarmUp:
    """Two judgments, one pinned to each slot, sent with the engine key."""
    return WarmUp("/completion", (b'{"prompt": "judge this", "id_slot": 0}',
                                  b'{"prompt": "judge this", "id_slot": 1}'),
                  timeout_s, {"Authorization": f"Bearer {KEY}"})


async def test_a_warm_up_is_answered_by_every_slot_before_the_replica_is_reported_ready(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    # The engine takes a while over each judgment, as a cold judge does.
    launch = engines.launch("ok", "--completion-after", "0.5", warm_up=warm_up(),
                            env={"LLAMA_API_KEY": KEY})
    log_at_ready: list[str] = []

    async def report(replica_id: str, status: Status) -> None:
        if status.state == ReplicaState.READY:
            log_at_ready.extend(engines.log_path.read_text().splitlines())
        await reporter(replica_id, status)

    task = asyncio.create_task(Supervisor(launch, report, time.monotonic).run())
    try:
        await reporter.first(ReplicaState.READY)
    finally:
        task.cancel()
        await asyncio.wait({task})

    answered = sorted(line for line in log_at_ready if line.startswith("completion answered"))
    assert answered == ["completion answered id_slot=0", "completion answered id_slot=1"]
    assert reporter.states() == [ReplicaState.STARTING, ReplicaState.READY]


async def test_a_warm_up_the_engine_never_answers_is_given_up_on_and_the_replica_is_ready(
    engines: FakeEngines, reporter: RecordingReporter, caplog: pytest.LogCaptureFixture
) -> None:
    launch = engines.launch("ok", "--completion-after", "-1", warm_up=warm_up(timeout_s=0.5))
    async with supervising(launch, reporter):
        ready = await reporter.first(ReplicaState.READY)

    assert ready.last_error is None
    assert reporter.states() == [ReplicaState.STARTING, ReplicaState.READY]
    assert "warm-up not answered within 0.5s; ready without it" in caplog.text


async def test_a_warm_up_the_engine_refuses_is_logged_and_the_replica_is_ready(
    engines: FakeEngines, reporter: RecordingReporter, caplog: pytest.LogCaptureFixture
) -> None:
    # Sent without the key the engine requires: 401.
    launch = engines.launch("ok", warm_up=WarmUp("/completion", (b"{}",)),
                            env={"LLAMA_API_KEY": KEY})
    async with supervising(launch, reporter):
        await reporter.first(ReplicaState.READY)

    assert "warm-up failed (/completion answered 401); ready without it" in caplog.text


# --- crashing and restarting -------------------------------------------------------------------


async def test_an_engine_that_crashes_on_start_is_reported_failed_and_restarted(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    async with supervising(engines.launch("crash", "--crash-at", "before"), reporter):
        first = await reporter.wait_for(is_failed_with(1), "the first failure")
        await reporter.wait_for(is_failed_with(2), "a failure after a restart")

    assert first.last_error is not None
    assert f"exited with code {CRASH_CODE}" in first.last_error
    assert first.last_error.splitlines()[-1] == CRASH_LINE
    pids = [s.pid for s in reporter.statuses if s.state == ReplicaState.STARTING]
    assert len(pids) >= 2 and len(set(pids)) == len(pids), "each restart is a new process"
    assert ReplicaState.READY not in reporter.states()


async def test_an_engine_that_crashes_after_becoming_ready_is_restarted(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    async with supervising(engines.launch("crash", "--crash-at", "after"), reporter):
        failed = await reporter.wait_for(is_failed_with(1), "the crash")
        restarted = await reporter.wait_for(
            lambda s: s.state == ReplicaState.STARTING and s.restarts == 1, "the restart"
        )

    assert reporter.states()[:3] == [ReplicaState.STARTING, ReplicaState.READY, ReplicaState.FAILED]
    assert failed.last_error is not None
    assert f"exited with code {CRASH_CODE}" in failed.last_error
    assert CRASH_LINE in failed.last_error
    assert restarted.pid != reporter.statuses[0].pid
    assert len(engines.ports) >= 2


async def test_restarts_count_on_from_what_the_replica_already_had(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    async with supervising(engines.launch("crash"), reporter, restarts=5):
        failed = await reporter.first(ReplicaState.FAILED)

    assert reporter.statuses[0].restarts == 5
    assert failed.restarts == 6


async def test_an_engine_that_cannot_be_started_is_reported_failed(
    engines: FakeEngines, reporter: RecordingReporter, tmp_path: Path
) -> None:
    launch = Launch(
        replica_id=REPLICA,
        command=lambda port: [str(tmp_path / "no-such-engine"), "--port", str(port)],
        host="127.0.0.1",
        log_path=engines.log_path,
        backoff_base_s=0.05,
    )
    async with supervising(launch, reporter):
        failed = await reporter.first(ReplicaState.FAILED)
        await reporter.wait_for(is_failed_with(2), "a second attempt")

    assert failed.last_error is not None
    assert failed.last_error.startswith(f"cannot start engine {tmp_path / 'no-such-engine'}")
    assert ReplicaState.STARTING not in reporter.states()


# --- stopping ----------------------------------------------------------------------------------


async def test_stopping_a_well_behaved_engine_does_not_wait_out_the_grace(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    launch = engines.launch("ok", stop_grace_s=10.0)
    async with supervising(launch, reporter) as task:
        ready = await reporter.first(ReplicaState.READY)
        stopping_at = time.monotonic()

    assert task.cancelled()
    assert time.monotonic() - stopping_at < 5.0
    assert ready.pid is not None and gone(ready.pid)


async def test_an_engine_that_ignores_sigterm_is_killed_after_the_grace(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    launch = engines.launch("hang-on-term", stop_grace_s=0.5)
    async with supervising(launch, reporter) as task:
        ready = await reporter.first(ReplicaState.READY)
        stopping_at = time.monotonic()

    took = time.monotonic() - stopping_at
    assert task.done()
    assert ready.pid is not None and gone(ready.pid)
    assert 0.5 <= took < 5.0, f"stop took {took:.2f}s"


async def test_processes_the_engine_started_are_stopped_with_it(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    async with supervising(engines.launch("ok", "--worker"), reporter):
        await reporter.first(ReplicaState.READY)
        [worker] = engines.worker_pids()
        assert not gone(worker)

    await eventually(lambda: gone(worker), f"the engine's worker {worker} exits")


async def test_a_crashed_engines_leftover_processes_are_killed_before_the_restart(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    async with supervising(engines.launch("crash", "--crash-at", "after", "--worker"), reporter):
        await reporter.wait_for(is_failed_with(1), "the crash")
        first_worker = engines.worker_pids()[0]

        await eventually(lambda: gone(first_worker), f"the crashed engine's worker {first_worker} exits")


# --- backoff -----------------------------------------------------------------------------------


def test_the_first_start_is_immediate() -> None:
    assert backoff_delay(0, base_s=1.0, cap_s=30.0) == 0.0


def test_backoff_doubles_with_each_consecutive_failure() -> None:
    assert [backoff_delay(n, base_s=1.0, cap_s=30.0) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_backoff_is_capped() -> None:
    assert backoff_delay(6, base_s=1.0, cap_s=30.0) == 30.0
    assert backoff_delay(500, base_s=1.0, cap_s=30.0) == 30.0


def test_backoff_scales_with_its_base() -> None:
    assert backoff_delay(3, base_s=0.05, cap_s=30.0) == pytest.approx(0.2)


# --- crash loops: named, backed off, given up on -----------------------------------------------


async def test_an_engine_killed_by_sigill_is_named_in_words_with_its_log(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    launch = engines.launch("crash", "--crash-signal", "ILL", engine="llama-server")
    async with supervising(launch, reporter):
        failed = await reporter.first(ReplicaState.FAILED)

    assert failed.last_error is not None
    first, log_line = failed.last_error.splitlines()[:2]
    assert first.startswith("llama-server stopped with an illegal instruction (SIGILL): this build "
                            "uses CPU instructions this machine cannot run")
    assert "llmgw doctor" in first
    assert log_line == f"engine log: {engines.log_path}"
    assert CRASH_LINE in failed.last_error  # and the engine's own last words


@pytest.mark.parametrize(("signal_name", "words"), [
    ("SEGV", "segmentation fault (SIGSEGV)"),
    ("BUS", "bus error (SIGBUS)"),
    ("KILL", "out-of-memory killer"),
])
async def test_other_deadly_signals_are_named_too(
    engines: FakeEngines, reporter: RecordingReporter, signal_name: str, words: str
) -> None:
    async with supervising(engines.launch("crash", "--crash-signal", signal_name), reporter):
        failed = await reporter.first(ReplicaState.FAILED)

    assert failed.last_error is not None
    assert words in failed.last_error.splitlines()[0]


async def test_a_crash_loop_backs_off_then_gives_up_and_stays_failed(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    launch = engines.launch("crash", "--crash-signal", "ILL", backoff_base_s=0.2, max_failures=3)
    starts: list[float] = []
    recorded = reporter.__call__

    async def timed(replica_id: str, status: Status) -> None:
        if status.state == ReplicaState.STARTING:
            starts.append(time.monotonic())
        await recorded(replica_id, status)

    task = asyncio.create_task(Supervisor(launch, timed, time.monotonic).run())
    sup_done = await asyncio.wait_for(task, 30)  # returns by itself: nobody cancels it

    assert sup_done is None
    final = reporter.statuses[-1]
    assert final.state == ReplicaState.FAILED and final.restarts == 3
    assert final.last_error is not None and final.last_error.startswith("gave up after 3 failed starts")
    assert "illegal instruction" in final.last_error.splitlines()[0]
    assert len(starts) == 3
    # Backoff between starts: 0.2 s, then 0.4 s (a start itself takes a little more).
    assert starts[1] - starts[0] >= 0.2 and starts[2] - starts[1] >= 0.4
    # Each restart says what the last start died of, so it never looks like a first start.
    restarting = [s for s in reporter.statuses if s.state == ReplicaState.STARTING][1:]
    assert all(s.last_error and s.last_error.startswith("restarting after") and "SIGILL" in s.last_error
               for s in restarting)
    assert not tagged(engines.tag)


async def test_a_remedy_for_a_crash_at_start_is_tried_at_once_without_counting_a_failure(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    remedy: list[str] = []

    def adapt(ended: Exit, argv: list[str]) -> str | None:
        if ended.illegal_instruction and "--no-repack" not in argv:
            remedy.append("--no-repack")
            return "starting it again with --no-repack"
        return None

    launch = engines.launch("crash", "--crash-signal", "ILL", "--crash-unless=--no-repack",
                            backoff_base_s=30.0, adapt=adapt)
    base = launch.command
    launch = dataclasses.replace(launch, command=lambda port: [*base(port), *remedy])
    async with supervising(launch, reporter):
        ready = await reporter.first(ReplicaState.READY, timeout_s=20)

    # No failure reported and no backoff waited (30 s here): the second start came at once.
    assert ReplicaState.FAILED not in reporter.states()
    assert ready.restarts == 0
    assert len(engines.ports) == 2


async def test_an_engine_that_serves_between_crashes_is_restarted_and_never_given_up_on(
    engines: FakeEngines, reporter: RecordingReporter
) -> None:
    # Each start becomes ready, then dies: a crash while serving, not a start that fails.
    launch = engines.launch("crash", "--crash-at", "after", max_failures=2)
    async with supervising(launch, reporter) as task:
        await reporter.wait_for(is_failed_with(3), "a third crash")
        assert not task.done()
    assert not any((s.last_error or "").startswith("gave up") for s in reporter.statuses)
