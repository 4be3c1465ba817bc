"""The change note's race, on a fresh HA install with a judge machine.

`server init --judge-node role=judge` asks for the default judge (a serve job the leader runs as
soon as a server starts). The local Hub is slow, so init's fetch is still going when the judge
keeper's grace ends. In the original system the leader then served its own judge, its entry
replaced init's, and a second judge ran off the judge machine. Here, at the end, exactly one
judge runs, on the judge machine, from init's one job.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmgw.core.judges import DEFAULT_JUDGE, KNOWN
from tests.fakes.gguf_files import write_gguf
from tests.support.cluster import TIMINGS, Cluster, hold
from tests.support.local_hub import Hub
from tests.support.pg import fresh_database

SPEC = KNOWN[DEFAULT_JUDGE]
# 1 MiB of weights at 64 KiB per 0.6 s: about 10 s per fetch, several keeper looks past the grace
# even when the cluster's servers (each with its workers) and nodes take seconds to come up on a
# busy 2-core machine (at 5 s per fetch it was sometimes over before the window).
WEIGHTS = np.zeros(256 * 1024, dtype=np.float32)
CHUNK_DELAY_S = 0.6
GRACE_S = 1.0
KEEPER_INTERVAL_S = float(TIMINGS["keeper_interval_s"])


@pytest.fixture
def slow_hub(tmp_path: Path) -> Iterator[Hub]:
    root = tmp_path / "hub"
    target = root / SPEC.repo / SPEC.file
    target.parent.mkdir(parents=True)
    write_gguf(target, tensors={"weights": WEIGHTS})
    hub = Hub(root)
    hub.start("--chunk-delay", str(CHUNK_DELAY_S))
    yield hub
    hub.stop()


def judge_status(cluster: Cluster) -> dict[str, Any]:
    rows = cluster.any_server().get("/admin/v1/guard/judges")["data"]
    return next(r for r in rows if r["judge"] == DEFAULT_JUDGE)


def jobs(cluster: Cluster) -> list[dict[str, Any]]:
    return [j for j in cluster.any_server().get("/admin/v1/jobs")["data"]
            if j["model"] == DEFAULT_JUDGE]


@pytest.mark.timeout(240)
def test_one_judge_on_the_judge_machine_when_init_is_still_fetching_after_the_grace(
    postgres_url: str, tmp_path: Path, slow_hub: Hub
) -> None:
    # Servers (the serve job) and node agents (their own copy of the file) fetch from the Hub.
    with Cluster.up(tmp_path, fresh_database(postgres_url), servers=2,
                    init_args=("--judge-node", "role=judge"), extra_env={"HF_ENDPOINT": slow_hub.url},
                    settings={"judge_grace_s": GRACE_S}) as cluster:
        # The keepers start when a leader is elected; the grace runs from the judge keeper's
        # first look, which comes with the first replica-keeper pass.
        leader = cluster.wait_leader()
        cluster.wait("the leader's keepers to start", lambda: leader.cluster()["last_reconcile_at"], 10)
        started = time.monotonic()
        cluster.add_node("node-a", cores=4, memory_gb=8)
        cluster.add_node("node-b", cores=8, memory_gb=16)
        cluster.add_node("judge-box", cores=4, memory_gb=8, labels={"role": "judge"})
        cluster.wait_nodes_ready()
        [init_job] = jobs(cluster)
        assert init_job["request"]["by"] == "llmgw server init"

        # The race window: the grace is over (plus a few keeper looks) and init's job is still
        # fetching. The keeper sees the judge missing from the catalog and must wait for that
        # job, not start its own.
        cluster.wait("the keeper's grace to be over",
                     lambda: time.monotonic() > started + GRACE_S + 3 * KEEPER_INTERVAL_S, 10)
        [fetching] = jobs(cluster)
        assert fetching["state"] in ("queued", "fetching"), "the fetch was too fast for the race"
        assert judge_status(cluster)["keeper"] == f"fetching (job {init_job['id']})"

        ready = cluster.wait_ready_replicas(DEFAULT_JUDGE, 2, timeout_s=120)

        assert {r["node_id"] for r in ready} == {"judge-box"}
        [entry] = [m for m in cluster.any_server().get("/admin/v1/models")["data"]
                   if m["name"] == DEFAULT_JUDGE]
        assert entry["by"] == "llmgw server init"
        assert [p["node_selector"] for p in entry["profiles"]] == [{"role": "judge"}]
        assert [(j["id"], j["state"]) for j in jobs(cluster)] == [(init_job["id"], "running")]

        # And it stays that way: no second job, no replica of the judge anywhere else.
        def still_one_judge() -> bool:
            live = cluster.live_replicas(DEFAULT_JUDGE)
            return len(jobs(cluster)) == 1 and {r["node_id"] for r in live} == {"judge-box"} \
                and len(live) == 2

        hold("exactly one judge, on the judge machine", still_one_judge, 3)
