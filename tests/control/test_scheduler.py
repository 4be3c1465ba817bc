"""The scheduler: filter, fit and score, with plain data and a fixed "now"."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from llmgw.control.placement import free_on
from llmgw.control.scheduler import (
    SUMMARY_MAX,
    Cluster,
    Decision,
    Placement,
    Rejection,
    Unschedulable,
    Verdict,
    explain,
    schedule,
)
from llmgw.core.types import Model, Node, Profile, Replica
from tests.factories import (
    NOW,
    cpu_profile,
    gemma_model,
    gpu_node,
    gpu_profile,
    judge_machine,
    judge_profile,
    local_model,
    node,
    node_2_cores,
    node_8_cores,
    qwen_guard_model,
    replica_placed,
    silent_node,
    tiny_node,
)


def placed_on(decision: Decision) -> str:
    assert isinstance(decision, Placement), decision
    return decision.node_id


def nowhere(decision: Decision) -> Unschedulable:
    assert isinstance(decision, Unschedulable), decision
    return decision


def place_all(
    model: Model, nodes: list[Node], count: int, replicas: list[Replica] | None = None
) -> list[str]:
    """Where `count` replicas of `model` go, one after the other, in one plan."""
    cluster = Cluster(nodes, replicas or [], NOW)
    where = []
    for _ in range(count):
        decision = cluster.schedule(model)
        assert isinstance(decision, Placement), decision
        cluster.take(model.name, decision)
        where.append(decision.node_id)
    return where


# --- filter ------------------------------------------------------------------------------------


def test_a_node_selector_sends_a_judge_to_the_judge_machine_only() -> None:
    guard = qwen_guard_model(profiles=[judge_profile()])
    nodes = [node_8_cores(), judge_machine()]

    assert placed_on(schedule(guard, nodes, [], NOW)) == "judge-box"


def test_a_node_with_the_label_set_to_another_value_is_rejected_by_name() -> None:
    guard = qwen_guard_model(profiles=[judge_profile()])
    other_role = judge_machine("n1", labels={"role": "chat"})

    decision = nowhere(schedule(guard, [other_role], [], NOW))

    assert decision.rejections == (Rejection("judge", "n1", "node n1 lacks label role=judge"),)


def test_a_cordoned_node_gets_nothing() -> None:
    nodes = [node_8_cores("maint", cordoned=True), node_2_cores()]
    assert placed_on(schedule(gemma_model(), nodes, [], NOW)) == "small"
    decision = nowhere(schedule(gemma_model(), nodes[:1], [], NOW))
    assert decision.summary == "does not fit: profile default: node maint is cordoned"


def test_a_draining_node_gets_nothing() -> None:
    nodes = [node_8_cores("old", draining=True), node_2_cores()]
    assert placed_on(schedule(gemma_model(), nodes, [], NOW)) == "small"
    decision = nowhere(schedule(gemma_model(), nodes[:1], [], NOW))
    assert decision.rejections == (Rejection("default", "old", "node old is draining"),)


def test_a_lost_node_gets_nothing_and_says_for_how_long_it_has_been_silent() -> None:
    nodes = [silent_node("n2", silent_s=47), node_2_cores()]
    assert placed_on(schedule(gemma_model(), nodes, [], NOW)) == "small"

    decision = nowhere(schedule(gemma_model(), nodes[:1], [], NOW))

    assert decision.rejections == (Rejection("default", "n2", "node n2 is lost (no heartbeat for 47s)"),)


def test_the_node_timeout_decides_when_a_node_is_lost() -> None:
    quiet = silent_node("n2", silent_s=47)
    assert placed_on(schedule(gemma_model(), [quiet], [], NOW, timedelta(seconds=60))) == "n2"
    decision = nowhere(schedule(gemma_model(), [quiet], [], NOW, timedelta(seconds=30)))
    assert decision.summary == "no node is available (none has reported in the last 30s)"


def test_a_node_that_never_reported_is_lost() -> None:
    decision = nowhere(schedule(gemma_model(), [node_8_cores("new", heartbeat_at=None)], [], NOW))
    assert decision.rejections[0].reason == "node new is lost (it has never reported)"


def test_a_gpu_profile_goes_to_a_node_with_its_gpu_class() -> None:
    model = gemma_model(profiles=[gpu_profile(gpu=1, gpu_class="l4")])
    nodes = [gpu_node("a100-box", gpus={"a100": 4}), gpu_node("l4-box", gpus={"l4": 1})]

    decision = schedule(model, nodes, [], NOW)

    assert decision == Placement("l4-box", model.profiles[0], "l4", ("l4-0",))


def test_a_gpu_profile_without_a_class_takes_a_class_with_enough_gpus() -> None:
    model = gemma_model(profiles=[gpu_profile(gpu=2, gpu_class=None)])
    mixed = gpu_node("mixed", gpus={"a100": 1, "l4": 2})

    decision = schedule(model, [mixed], [], NOW)

    assert isinstance(decision, Placement) and decision.gpu_class == "l4"


def test_too_few_gpus_in_total_and_too_few_free_are_told_apart() -> None:
    model = gemma_model(profiles=[gpu_profile(gpu=2, gpu_class="l4")])
    one = gpu_node("one", gpus={"l4": 1})
    two_busy = gpu_node("two", gpus={"l4": 2})
    busy = replica_placed("r1", node_id="two", gpu_class="l4", gpus=1)

    decision = nowhere(schedule(model, [one, two_busy], [busy], NOW))

    assert [r.reason for r in decision.rejections] == [
        "needs 2 GPU(s) of class l4; node one has 1",
        "needs 2 GPU(s) of class l4; node two has 1 of 2 free",
    ]


# --- fit ---------------------------------------------------------------------------------------


def test_a_node_with_too_little_memory_is_never_chosen_however_many_cores_it_has_free() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=1, memory_gb=4.0)])
    # tiny has 16 cores and 2 GB: the fullest node, which packing would otherwise prefer.
    assert place_all(model, [tiny_node(), node_8_cores()], 3) == ["big", "big", "big"]


def test_a_node_whose_memory_is_held_by_others_is_not_chosen_and_says_how_much_is_free() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=1, memory_gb=1.75)])
    n3 = node("n3", cores=4, memory_gb=2.0)
    held = replica_placed("r1", model="other", node_id="n3", cores=1, memory_gb=0.5)

    decision = nowhere(schedule(model, [n3], [held], NOW))

    assert decision.summary == (
        "does not fit: profile default: needs 1.75 GB memory; node n3 has 1.5 of 2 GB free"
    )


def test_a_profile_without_cores_needs_no_free_core() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=0, memory_gb=1.0)])
    full = replica_placed("r1", model="other", node_id="small", cores=2, memory_gb=1.0)
    assert placed_on(schedule(model, [node_2_cores()], [full], NOW)) == "small"


def test_exactly_what_is_free_fits() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=1, memory_gb=4.0)])
    half = replica_placed("r1", model="other", node_id="small", cores=1, memory_gb=4.0)
    assert placed_on(schedule(model, [node_2_cores()], [half], NOW)) == "small"


def test_what_this_plan_placed_is_taken_into_account() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=1, memory_gb=3.0)])
    cluster = Cluster([node_2_cores()], [], NOW)
    for _ in range(2):
        decision = cluster.schedule(model)
        assert isinstance(decision, Placement)
        cluster.take(model.name, decision)

    decision = nowhere(cluster.schedule(model))

    assert "needs 1 cores; node small has 0 of 2 free" in decision.summary


def test_models_with_the_same_profile_see_what_was_placed_in_between() -> None:
    two_cores = [cpu_profile(cores=2)]
    one_core = [cpu_profile(cores=1)]
    held = replica_placed("r1", model="other", node_id="small", cores=1)
    cluster = Cluster([node_2_cores()], [held], NOW)

    before = nowhere(cluster.schedule(gemma_model(profiles=two_cores))).summary
    decision = cluster.schedule(local_model("phi-4", profiles=one_core))
    assert isinstance(decision, Placement)
    cluster.take("phi-4", decision)
    after = nowhere(cluster.schedule(qwen_guard_model(profiles=two_cores))).summary

    assert before.endswith("node small has 1 of 2 free")
    assert after.endswith("node small has 0 of 2 free")


# --- score -------------------------------------------------------------------------------------


def test_replicas_of_one_model_spread_over_nodes_before_doubling_up() -> None:
    model = gemma_model()
    nodes = [node_8_cores("a"), node_8_cores("b"), node_2_cores("c")]

    where = place_all(model, nodes, 4)

    assert sorted(where[:3]) == ["a", "b", "c"]
    # The fourth goes where there is a replica already, the fullest such node first.
    assert where[3] == "c"


def test_existing_replicas_of_the_model_count_for_spreading() -> None:
    model = gemma_model()
    running = replica_placed("r1", node_id="small")
    assert place_all(model, [node_2_cores(), node_8_cores()], 1, [running]) == ["big"]


def test_different_models_pack_onto_the_fullest_node_that_fits() -> None:
    profile = [cpu_profile(cores=1, memory_gb=2.0)]
    nodes = [node_8_cores("roomy"), node_2_cores("snug")]
    cluster = Cluster(nodes, [], NOW)
    where = []
    for model in (gemma_model(profiles=profile), qwen_guard_model(profiles=profile)):
        decision = cluster.schedule(model)
        assert isinstance(decision, Placement)
        cluster.take(model.name, decision)
        where.append(decision.node_id)

    assert where == ["snug", "snug"]


def test_ties_in_memory_go_to_the_node_with_fewer_free_cores_then_by_id() -> None:
    model = gemma_model()
    nodes = [node("b", cores=8, memory_gb=16.0), node("c", cores=4, memory_gb=16.0),
             node("a", cores=4, memory_gb=16.0)]
    assert placed_on(schedule(model, nodes, [], NOW)) == "a"


# --- profiles in order -------------------------------------------------------------------------


def test_the_first_profile_that_fits_somewhere_wins() -> None:
    gpu, cpu = gpu_profile("gpu", gpu=1), cpu_profile("cpu", cores=2)
    model = gemma_model(profiles=[gpu, cpu])

    assert schedule(model, [node_8_cores(), gpu_node()], [], NOW) == Placement("gpu", gpu, "l4", ("l4-0",))
    assert schedule(model, [node_8_cores()], [], NOW) == Placement("big", cpu, None)


def test_a_later_profile_is_used_when_the_first_fits_nowhere_for_now() -> None:
    fast, lean = cpu_profile("fast", cores=4), cpu_profile("lean", cores=1)
    busy = replica_placed("r1", model="other", node_id="big", cores=6)
    decision = schedule(gemma_model(profiles=[fast, lean]), [node_8_cores()], [busy], NOW)
    assert decision == Placement("big", lean, None)


# --- reasons -----------------------------------------------------------------------------------


def test_every_node_gives_its_reason_for_every_profile() -> None:
    model = qwen_guard_model(profiles=[judge_profile("cpu", memory_gb=8.0), gpu_profile("gpu", gpu=1)])
    nodes = [node_8_cores("n1"), judge_machine("n2", cordoned=True), silent_node("n3"),
             judge_machine("n4", memory_gb=4.0)]

    decision = nowhere(schedule(model, nodes, [], NOW))

    assert decision.rejections == (
        Rejection("cpu", "n1", "node n1 lacks label role=judge"),
        Rejection("cpu", "n2", "node n2 is cordoned"),
        Rejection("cpu", "n3", "node n3 is lost (no heartbeat for 47s)"),
        Rejection("cpu", "n4", "needs 8 GB memory; node n4 has only 4 GB"),
        Rejection("gpu", "n1", "needs 1 GPU(s) of class l4; node n1 has 0"),
        Rejection("gpu", "n2", "node n2 is cordoned"),
        Rejection("gpu", "n3", "node n3 is lost (no heartbeat for 47s)"),
        Rejection("gpu", "n4", "needs 1 GPU(s) of class l4; node n4 has 0"),
    )
    assert decision.summary == (
        "does not fit: profile cpu: node n1 lacks label role=judge; node n2 is cordoned; "
        "node n3 is lost; needs 8 GB memory; node n4 has only 4 GB | "
        "profile gpu: needs 1 GPU(s) of class l4; node n1 has 0; "
        "needs 1 GPU(s) of class l4; node n4 has 0; node n2 is cordoned; node n3 is lost"
    )


def test_the_summary_counts_nodes_that_share_a_reason() -> None:
    model = qwen_guard_model(profiles=[judge_profile("cpu", memory_gb=8.0)])
    chat = [node_8_cores(f"c{i}") for i in range(3)]
    judges = [judge_machine("n4", memory_gb=4.0)]

    decision = nowhere(schedule(model, chat + judges, [], NOW))

    assert len(decision.rejections) == 4
    assert decision.summary == (
        "does not fit: profile cpu: node c0 lacks label role=judge; node c1 lacks label "
        "role=judge; node c2 lacks label role=judge; needs 8 GB memory; node n4 has only 4 GB"
    )
    many = [node_8_cores(f"c{i}") for i in range(997)]
    decision = nowhere(schedule(model, many + judges, [], NOW))
    assert decision.summary == (
        "does not fit: profile cpu: 997 nodes lack label role=judge; "
        "needs 8 GB memory; node n4 has only 4 GB"
    )


def test_the_summary_stays_short_when_every_node_has_its_own_reason() -> None:
    model = gemma_model(profiles=[cpu_profile(f"p{i}", node_selector={f"k{i}": "v"}) for i in range(50)])
    nodes = [node(f"node-with-a-rather-long-name-{i:03d}", labels={f"k{i}": "other"}) for i in range(200)]

    decision = nowhere(schedule(model, nodes, [], NOW))

    assert len(decision.rejections) == 50 * 200
    assert len(decision.summary) <= SUMMARY_MAX
    assert decision.summary.startswith("does not fit: profile p0: 200 nodes lack label k0=v | ")


def test_the_summary_of_many_different_reasons_counts_the_rest() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=1, memory_gb=64.0, node_selector={"zone": "eu"})])
    eu = {"zone": "eu"}
    nodes = [
        *(node(f"small{i}", labels=eu) for i in range(2)),
        *(node_8_cores(f"cordoned{i}", cordoned=True) for i in range(2)),
        *(node_8_cores(f"draining{i}", draining=True) for i in range(2)),
        *(silent_node(f"lost{i}") for i in range(2)),
        *(node_8_cores(f"us{i}", labels={"zone": "us"}) for i in range(2)),
    ]

    summary = nowhere(schedule(model, nodes, [], NOW)).summary

    assert summary == (
        "does not fit: profile default: needs 64 GB memory; node small0 has only 16 GB; "
        "needs 64 GB memory; node small1 has only 16 GB; node cordoned0 is cordoned; "
        "node cordoned1 is cordoned; node draining0 is draining; node draining1 is draining; "
        "4 more nodes for other reasons"
    )


def test_the_summary_does_not_change_while_a_lost_node_stays_lost() -> None:
    model = gemma_model(profiles=[cpu_profile(cores=4)])
    later = NOW + timedelta(minutes=5)
    first = nowhere(schedule(model, [silent_node("gone"), node_2_cores()], [], NOW)).summary
    again = nowhere(schedule(model, [silent_node("gone"), node_2_cores(heartbeat_at=later)], [], later))
    assert first == again.summary
    assert again.rejections[0].reason == "node gone is lost (no heartbeat for 347s)"
    assert first == (
        "does not fit: profile default: node gone is lost; needs 4 cores; node small has only 2"
    )


# --- explain: what `ctl model resources` shows ---------------------------------------------------


def test_explain_says_for_every_profile_and_node_whether_one_more_replica_fits() -> None:
    model = qwen_guard_model(profiles=[judge_profile("cpu", cores=2), cpu_profile("any", cores=2)])
    nodes = [judge_machine("j1"), node_2_cores("s1"), node_8_cores("d1", draining=True)]
    busy = replica_placed("r1", model="other", node_id="s1", cores=1)

    assert explain(model, nodes, [busy], NOW) == [
        Verdict("cpu", "j1", None),
        Verdict("cpu", "s1", "node s1 lacks label role=judge"),
        Verdict("cpu", "d1", "node d1 is draining"),
        Verdict("any", "j1", None),
        Verdict("any", "s1", "needs 2 cores; node s1 has 1 of 2 free"),
        Verdict("any", "d1", "node d1 is draining"),
    ]


def test_explain_and_the_rejections_say_the_same_thing() -> None:
    model = gemma_model(profiles=[cpu_profile("a", cores=8), judge_profile("b", memory_gb=64.0)])
    nodes = [node_2_cores(), judge_machine(), silent_node()]

    decision = nowhere(schedule(model, nodes, [], NOW))

    verdicts = explain(model, nodes, [], NOW)
    assert [(r.profile, r.node_id, r.reason) for r in decision.rejections] == [
        (v.profile, v.node_id, v.reason) for v in verdicts
    ]


# --- the decision agrees with the per-node verdicts ----------------------------------------------


def random_cluster(rng: random.Random) -> tuple[list[Node], list[Replica], Model]:
    nodes = [
        node(f"n{i}", cores=rng.choice([1, 2, 4]), memory_gb=rng.choice([1.0, 2.0, 4.0]),
             labels={"role": rng.choice(["judge", "chat"])}, gpus=rng.choice([{}, {"l4": 1}, {"a100": 2}]),
             cordoned=rng.random() < 0.1, draining=rng.random() < 0.1,
             heartbeat_at=NOW - timedelta(seconds=rng.choice([0, 0, 0, 60])))
        for i in range(rng.randint(1, 6))
    ]
    replicas = [
        replica_placed(f"r{i}", model=rng.choice(["m", "other"]), node_id=rng.choice(nodes).id,
                       cores=rng.choice([0, 1, 2]), memory_gb=rng.choice([0.5, 1.0, 2.0]),
                       gpu_class=rng.choice([None, "l4"]), gpus=rng.choice([0, 0, 1]))
        for i in range(rng.randint(0, 8))
    ]
    profiles = [
        Profile(name=f"p{k}", cpu_cores=rng.choice([0, 1, 2, 3]), min_memory_gb=rng.choice([0.5, 1.0, 3.0]),
                gpu=rng.choice([0, 0, 1, 2]), gpu_class=rng.choice([None, "l4", "a100"]),
                node_selector=rng.choice([{}, {"role": "judge"}]))
        for k in range(rng.randint(1, 3))
    ]
    return nodes, replicas, local_model("m", profiles=profiles)


@pytest.mark.parametrize("seed", range(300))
def test_a_placement_is_made_exactly_when_some_node_fits_and_it_is_the_best_one(seed: int) -> None:
    nodes, replicas, model = random_cluster(random.Random(seed))

    decision = schedule(model, nodes, replicas, NOW)
    verdicts = explain(model, nodes, replicas, NOW)

    fitting = [v for v in verdicts if v.reason is None]
    if not fitting:
        assert isinstance(decision, Unschedulable)
        assert [r.reason for r in decision.rejections] == [v.reason for v in verdicts]
        return
    assert isinstance(decision, Placement)
    first = fitting[0].profile
    assert decision.profile.name == first
    candidates = {v.node_id for v in fitting if v.profile == first}
    assert decision.node_id in candidates
    # Best: fewest replicas of the model, then least free memory, then least free cores, then id.
    by_id = {n.id: n for n in nodes}

    def score(node_id: str) -> tuple[int, float, int, str]:
        free = free_on(by_id[node_id], replicas)
        mine = sum(1 for r in replicas if r.node_id == node_id and r.model == "m")
        return mine, free.memory_gb, free.cores, node_id

    assert decision.node_id == min(candidates, key=score)


def test_other_models_keep_off_the_judge_machine_while_they_fit_elsewhere() -> None:
    box, other = judge_machine("judge-box"), node("other", cores=4, memory_gb=16.0)
    judge = local_model("qwen3guard-0.6b", guard=True, profiles=[judge_profile()], replicas=2)
    chat = local_model("chat")
    # The judge already runs on its machine: packing alone would put `chat` there too.
    running = [replica_placed("j1", "qwen3guard-0.6b", node_id="judge-box")]
    cluster = Cluster([box, other], running, NOW, judge_machine={"role": "judge"})

    assert placed_on(cluster.schedule(chat)) == "other"
    assert placed_on(cluster.schedule(judge)) == "judge-box"
    # When nothing else fits, the judge machine still takes it rather than nothing.
    full = [*running, replica_placed("c1", "big", node_id="other", cores=4, memory_gb=16.0)]
    assert placed_on(Cluster([box, other], full, NOW, judge_machine={"role": "judge"})
                     .schedule(chat)) == "judge-box"


# --- making room (the seam eviction uses) ------------------------------------------------------


def test_a_replica_released_in_the_plan_frees_its_share_for_the_next_decision() -> None:
    big = gemma_model(profiles=[cpu_profile(cores=1, memory_gb=6.0)])
    other = replica_placed("r-phi", "phi-4", node_id="small", memory_gb=4.0)
    cluster = Cluster([node_2_cores()], [other], NOW)
    assert isinstance(cluster.schedule(big), Unschedulable)

    cluster.release(other)

    assert placed_on(cluster.schedule(big)) == "small"


def test_fits_without_answers_for_one_node_and_changes_nothing() -> None:
    big = gemma_model(profiles=[cpu_profile(cores=1, memory_gb=6.0)])
    other = replica_placed("r-phi", "phi-4", node_id="small", memory_gb=4.0)
    cluster = Cluster([node_2_cores(), node_8_cores(cordoned=True)], [other], NOW)

    where = cluster.fits_without(big, "small", [other])

    assert where is not None and where.node_id == "small" and where.profile.name == "default"
    assert cluster.fits_without(big, "small", []) is None
    assert cluster.fits_without(big, "big", []) is None  # cordoned: filtered before any fit
    assert isinstance(cluster.schedule(big), Unschedulable)  # nothing was released
    assert cluster.open_nodes() == ["small"]
