"""What the scheduler costs: the replica keeper's pure plan on a big cluster, no database.

Places 10,000 replicas (1,000 models × scaling.min 10) on 1,000 heterogeneous nodes in one
plan, three times, and prints the median; then the steady-state cost of one keeper pass: a
plan on the already-full cluster in which 10 more replicas are wanted.

    .venv/bin/python bench/scheduler.py [--nodes 1000] [--models 1000] [--replicas 10]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from llmgw.control.replica_keeper import Action, Pend, Place, new_replica, plan
from llmgw.core.types import Engine, LocalSource, Model, Node, Profile, Replica, Scaling

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUNS = 3
# The nodes labelled role=judge are the judge machine: other models go there last.
JUDGE_MACHINE = {"role": "judge"}


def cluster(count: int, rng: random.Random) -> list[Node]:
    """Mostly CPU machines of three sizes, a tenth with GPUs; a fifth labelled role=judge,
    two zones."""
    nodes = []
    for i in range(count):
        cores, memory = rng.choice([(8, 32.0), (16, 64.0), (32, 128.0)])
        labels = {"zone": "eu" if i % 2 else "us"}
        if i % 5 == 0:
            labels["role"] = "judge"
        gpus = {rng.choice(["l4", "a100"]): rng.choice([1, 2, 4])} if i % 10 == 3 else {}
        nodes.append(Node(id=f"n{i:04d}", labels=labels, cores=cores, memory_gb=memory,
                          gpus=gpus, heartbeat_at=NOW))
    return nodes


def catalog(count: int, replicas: int, rng: random.Random) -> list[Model]:
    """Models of a few shapes: plain CPU ones of varied sizes, judges pinned to role=judge,
    GPU ones that fall back to CPU, and a few that fit nowhere (a label no node has)."""
    models = []
    for i in range(count):
        cores = rng.choice([0, 1, 2, 4])
        memory = rng.choice([0.5, 1.0, 2.0, 4.0, 8.0])
        cpu = Profile(name="cpu", engine=Engine.LLAMACPP, cpu_cores=cores, min_memory_gb=memory)
        kind = i % 10
        if kind == 0:
            profiles = [cpu.model_copy(update={"node_selector": {"role": "judge"}})]
        elif kind == 1:
            gpu = Profile(name="gpu", engine=Engine.LLAMACPP, cpu_cores=1, min_memory_gb=memory,
                          gpu=1, gpu_class=rng.choice(["l4", "a100", None]))
            profiles = [gpu, cpu]
        elif i % 100 == 7:
            profiles = [cpu.model_copy(update={"node_selector": {"zone": "mars"}})]
        else:
            profiles = [cpu]
        models.append(Model(name=f"m{i:04d}", source=LocalSource(path=f"/models/m{i}.gguf"),
                            profiles=profiles, scaling=Scaling(min=replicas, max=replicas),
                            guard=kind == 0))
    return models


def placed(actions: list[Action]) -> list[Replica]:
    """The rows the store holds after applying a plan made on an empty cluster."""
    return [new_replica(a) for a in actions if isinstance(a, Place | Pend)]


def timed(run: Callable[[], list[Action]]) -> tuple[float, list[Action]]:
    start = time.perf_counter()
    actions = run()
    return time.perf_counter() - start, actions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=10, help="scaling.min of every model")
    args = parser.parse_args()
    rng = random.Random(7)
    nodes = cluster(args.nodes, rng)
    models = catalog(args.models, args.replicas, rng)

    full: list[float] = []
    actions: list[Action] = []
    for _ in range(RUNS):
        seconds, actions = timed(lambda: plan(models, nodes, [], NOW, judge_machine=JUDGE_MACHINE))
        full.append(seconds)
    places = sum(isinstance(a, Place) for a in actions)
    pends = [a for a in actions if isinstance(a, Pend)]

    # Steady state: the cluster as the full plan left it, and ten more replicas wanted.
    rows = placed(actions)
    grown = [m.model_copy(update={"scaling": Scaling(min=m.scaling.min + 1, max=m.scaling.max + 1)})
             if i < 10 else m for i, m in enumerate(models)]
    steady: list[float] = []
    again: list[Action] = []
    for _ in range(RUNS):
        seconds, again = timed(lambda: plan(grown, nodes, rows, NOW, judge_machine=JUDGE_MACHINE))
        steady.append(seconds)

    wanted = args.models * args.replicas
    median = statistics.median(full)
    more = sum(isinstance(a, Place) for a in again)
    print(f"scheduler: median of {RUNS} runs, pure plan, no database\n")
    print("| plan | nodes | replicas | models | seconds | placements/s | placed | unschedulable |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| all on an empty cluster | {len(nodes)} | {wanted} | {len(models)} | {median:.3f} | "
          f"{places / median:,.0f} | {places} | {wanted - places} |")
    print(f"| 10 more on the full cluster | {len(nodes)} | 10 | {len(models)} | "
          f"{statistics.median(steady):.3f} | - | {more} | {10 - more} |")
    reasons = sorted({a.reason for a in pends + [a for a in again if isinstance(a, Pend)]})
    if reasons:
        print("\nwhy the unschedulable ones wait:")
        for reason in reasons:
            print(f"- {reason}")

if __name__ == "__main__":
    main()
