"""The node agent with an engine that dies at start: the SIGILL remedy learned once per host, and
a crash loop given up on until the model or profile changes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.core.clock import SystemClock
from llmgw.core.types import ReplicaState
from llmgw.engines.crashes import GAVE_UP
from llmgw.node.agent import AgentConfig, Assignment, NodeAgent
from llmgw.node.engine_compat import EngineCompat
from tests.factories import cpu_profile, gemma_model, replica_placed
from tests.fakes.processes import eventually
from tests.node.conftest import Reports, agent_for, engine_script


async def test_a_start_that_dies_of_sigill_runs_again_with_no_repack_and_the_host_remembers(
    tmp_path: Path, reports: Reports
) -> None:
    binary = engine_script(tmp_path, "--mode", "crash", "--crash-signal", "ILL",
                           "--crash-unless=--no-repack")
    assigned = [Assignment(replica_placed("rep-1"), gemma_model())]
    agent = agent_for(tmp_path, binary, reports, assigned)
    try:
        await agent.reconcile()
        await reports.until(lambda s: s.state == ReplicaState.READY, "ready with --no-repack")
    finally:
        await agent.stop_all()

    assert ReplicaState.FAILED not in [s.state for s in reports.seen]
    assert EngineCompat(tmp_path / "engine-compat.json", cpu="test-cpu").extra_args(binary) == [
        "--no-repack"]
    log = (tmp_path / "logs" / "rep-1.log").read_text()
    assert log.count("fake engine pid") == 2  # one start died, the next ran

    # Another replica on this host starts with the flag at once: no second crash.
    again = Reports()
    second = agent_for(tmp_path, binary, again, [Assignment(replica_placed("rep-2"), gemma_model())])
    try:
        await second.reconcile()
        await again.until(lambda s: s.state == ReplicaState.READY, "the second replica ready")
    finally:
        await second.stop_all()
    assert (tmp_path / "logs" / "rep-2.log").read_text().count("fake engine pid") == 1


async def test_a_crash_loop_stays_failed_until_the_profile_changes(tmp_path: Path, reports: Reports) -> None:
    binary = engine_script(tmp_path, "--mode", "crash", "--crash-signal", "SEGV")
    model = gemma_model()
    assigned = [Assignment(replica_placed("rep-1", state=ReplicaState.FAILED), model)]
    agent = agent_for(tmp_path, binary, reports, assigned, max_failures=2)
    try:
        await agent.reconcile()
        gave_up = await reports.until(lambda s: (s.last_error or "").startswith(GAVE_UP), "giving up")
        assert gave_up.state == ReplicaState.FAILED
        assert "segmentation fault" in (gave_up.last_error or "").splitlines()[0]
        await eventually(lambda: not agent.running, "the supervisor ends by itself")

        # Reconciling again starts nothing: the replica stays failed, not restarted in a loop.
        count = len(reports.seen)
        await agent.reconcile()
        await agent.reconcile()
        assert len(reports.seen) == count and not agent.running

        # A changed profile (say, other args) is a new try.
        changed = model.model_copy(update={"profiles": [cpu_profile().model_copy(
            update={"args": ["--ctx-size", "1024"]})]})
        assigned[0] = Assignment(assigned[0].replica, changed)
        await agent.reconcile()
        assert agent.running == {"rep-1"}
        await reports.until(lambda s: s.state == ReplicaState.STARTING and reports.seen.index(s) >= count,
                            "a new start")
    finally:
        await agent.stop_all()



async def test_a_give_up_landing_while_assignments_are_read_is_not_taken_for_a_stop(
    tmp_path: Path, reports: Reports
) -> None:
    # The supervisor's last report (gave up) wakes the agent, whose next pass reads the
    # assignments while the supervisor is still ending: it must not see a replica that is
    # neither running nor given up, and start it again.
    binary = engine_script(tmp_path, "--mode", "crash", "--crash-signal", "SEGV")
    assigned = [Assignment(replica_placed("rep-1", state=ReplicaState.FAILED), gemma_model())]
    reading = asyncio.Event()
    go_on = asyncio.Event()

    async def assignments() -> list[Assignment]:
        reading.set()
        await go_on.wait()
        return list(assigned)

    async def forget(rid: str) -> None:
        return None

    config = AgentConfig(node_id="big", host="127.0.0.1", log_dir=tmp_path / "logs",
                         llama_server=lambda: binary, backoff_base_s=0.05, max_failures=2,
                         compat=EngineCompat(tmp_path / "engine-compat.json", cpu="test-cpu"))
    agent = NodeAgent(config, assignments, reports, forget, SystemClock())
    try:
        go_on.set()
        await agent.reconcile()  # starts it
        go_on.clear()
        reading.clear()
        second = asyncio.create_task(agent.reconcile())
        await reading.wait()  # the pass is reading its assignments: now the supervisor gives up
        await reports.until(lambda s: (s.last_error or "").startswith(GAVE_UP), "giving up")
        await eventually(lambda: not agent.running, "the supervisor ends by itself")
        count = len(reports.seen)
        go_on.set()
        await second
        assert not agent.running, "a replica given up on was started again"
        await agent.reconcile()
        assert len(reports.seen) == count and not agent.running
    finally:
        await agent.stop_all()
