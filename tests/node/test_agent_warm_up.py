"""The node agent warms a judge's replica with the judge's own prompt, on every slot, before it
reports it ready; a model that is not a judge gets no warm-up."""

from __future__ import annotations

import json
from pathlib import Path

from llmgw.core.guard import Direction
from llmgw.core.judges import KNOWN
from llmgw.core.types import ReplicaState
from llmgw.guard.judge_client import WARM_UP_TURNS, completion_body, warm_up
from llmgw.node.agent import Assignment
from llmgw.node.supervisor import Status
from tests.factories import cpu_profile, gemma_model, qwen_guard_model, replica_placed
from tests.node.conftest import Reports, agent_for, engine_script

KEY = "engine-key-test"


def asked(log: Path) -> list[tuple[str, str]]:
    """(id_slot, prompt) of every judgment the engine was sent, from its log."""
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("completion id_slot="):
            slot, _, prompt = line.removeprefix("completion id_slot=").partition(" prompt=")
            out.append((slot, json.loads(prompt)))
    return out


class AskedAtReady(Reports):
    """The reports, and what each replica's engine had been asked when it was reported ready."""

    def __init__(self, logs: Path) -> None:
        super().__init__()
        self.logs = logs
        self.asked: dict[str, list[tuple[str, str]]] = {}

    async def __call__(self, replica_id: str, status: Status) -> None:
        if status.state == ReplicaState.READY:
            self.asked[replica_id] = asked(self.logs / f"{replica_id}.log")
        await super().__call__(replica_id, status)


async def test_a_judge_replica_answers_its_own_prompt_on_each_slot_before_it_is_ready(
    tmp_path: Path,
) -> None:
    binary = engine_script(tmp_path, "--completion-after", "0.3")
    judge = qwen_guard_model(profiles=[cpu_profile(args=["--parallel", "2"])])
    assigned = [Assignment(replica_placed("judge-1", judge.name), judge),
                Assignment(replica_placed("chat-1"), gemma_model())]
    reports = AskedAtReady(tmp_path / "logs")
    # The engine requires its key, as llmgw's engines do: the warm-up carries it.
    agent = agent_for(tmp_path, binary, reports, assigned, warm_up=warm_up(),
                      engine_key=lambda: KEY)
    try:
        await agent.reconcile()
        await reports.until(lambda _: len(reports.asked) == 2, "both replicas ready")
    finally:
        await agent.stop_all()

    # The judge's real input prompt, as the gateway renders it: its fixed head is what every
    # later input judgment shares, now in each slot's KV cache.
    prompt = completion_body(KNOWN[judge.name], Direction.INPUT, list(WARM_UP_TURNS))["prompt"]
    assert sorted(reports.asked["judge-1"]) == [("0", prompt), ("1", prompt)]
    assert reports.asked["chat-1"] == []
