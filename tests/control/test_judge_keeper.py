"""The judge keeper: `plan` and `judge_status` with plain data, `JudgeKeeper` with in-memory callables."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from llmgw.control.judge_keeper import (
    JUDGE_GRACE,
    JUDGE_RETRY,
    REFIT_BY,
    SERVED_BY,
    KeeperAction,
    KeeperState,
    KeeperView,
    Refit,
    Restart,
    Say,
    ServeJudge,
    Warn,
    judge_memory_gb,
    judge_request,
    judge_status,
    plan,
    refit_cores,
    roomiest_gpu_class,
)
from llmgw.control.judge_loop import JudgeKeeper
from llmgw.control.judge_scaling import Scale
from llmgw.core.clock import FakeClock
from llmgw.core.guard import JudgeLoad, JudgeSpec, Policy
from llmgw.core.judges import DEFAULT_JUDGE, DEMO_JUDGE, KNOWN
from llmgw.core.protocol.models import JobState, ServeJob, ServeRequest
from llmgw.core.types import Engine, HubSource, Model, Profile, Scaling
from tests.factories import NOW

QWEN_4B = "qwen3guard-4b"  # a CPU judge init does not install
QWEN_8B = "qwen3guard-8b"  # a GPU judge
TODAYS_ARGS = ["--ctx-size", "8192", "--cache-ram", "0", "--parallel", "2"]
AFTER_GRACE = NOW + JUDGE_GRACE


# --- domain data -------------------------------------------------------------------------------


def judge_policy(*judges: str, name: str = "default", enabled: bool = True) -> Policy:
    """A guard policy naming `judges` (the default judge when none are given)."""
    return Policy(name=name, judges=list(judges) or [DEFAULT_JUDGE], enabled=enabled)


def node_cores(*cores: int) -> list[int]:
    """The cluster's nodes, by their core counts."""
    return list(cores)


def judge_profile(
    *, args: list[str], cores: int = 1, memory_gb: float = 2.0, name: str = "cpu", **over: Any
) -> Profile:
    return Profile(name=name, engine=Engine.LLAMACPP, args=args, cpu_cores=cores, min_memory_gb=memory_gb,
                   **over)


def judge_model(name: str = DEFAULT_JUDGE, *, profiles: list[Profile], replicas: int = 2) -> Model:
    spec = KNOWN[name]
    return Model(name=name, source=HubSource(repo=spec.repo, file=spec.file), profiles=profiles,
                 scaling=Scaling(min=replicas, max=replicas), guard=True, by="llmgw server init")


def init_judge_model(*, cores: int = 1, memory_gb: float = 2.0, replicas: int = 2) -> Model:
    """The default judge exactly as an earlier `server init` wrote it: prompt cache on, few cores."""
    profile = judge_profile(args=["--ctx-size", "8192"], cores=cores, memory_gb=memory_gb)
    return judge_model(profiles=[profile], replicas=replicas)


def todays_init_judge_model() -> Model:
    """The default judge as init writes it now."""
    return judge_model(profiles=[judge_profile(args=TODAYS_ARGS, cores=2)])


def hand_set_judge_model() -> Model:
    """The default judge after an operator gave it a bigger context and kept the prompt cache."""
    return judge_model(profiles=[judge_profile(args=["--ctx-size", "16384"], cores=6, memory_gb=3.0)])


def judge_job(
    name: str, state: JobState = JobState.FETCHING, *, id: str = "job-init", by: str = "llmgw server init"
) -> ServeJob:
    spec = KNOWN[name]
    request = ServeRequest(name=name, source=HubSource(repo=spec.repo, file=spec.file), guard=True,
                           if_absent=True, by=by)
    return ServeJob(id=id, request=request, state=state, created_at=NOW)


def repo_judge(name: str = "acme-guard", *, gpu: bool = False) -> JudgeSpec:
    """A judge llmgw does not know, enabled by `ctl guard judge enable --repo`."""
    return JudgeSpec(name=name, repo="acme/acme-guard-GGUF", file="acme-guard.Q4_K_M.gguf", size_gb=0.5,
                     gpu=gpu)


def view(*judges: str, **over: Any) -> KeeperView:
    """A leader with the guard on, a policy naming `judges`, the judge library, two 16-core nodes."""
    fields: dict[str, Any] = {
        "policies": [judge_policy(*judges)],
        "known": KNOWN,
        "node_cores": node_cores(16, 16),
    }
    fields.update(over)
    return KeeperView(**fields)


def looked_at(v: KeeperView, *moments: datetime) -> tuple[list[KeeperAction], KeeperState]:
    """Plan at each moment in turn, carrying the state; the last look's actions and state."""
    state = KeeperState()
    actions: list[KeeperAction] = []
    for at in moments:
        actions, state = plan(state, v, at)
    return actions, state


def served(actions: list[KeeperAction]) -> list[str]:
    return [a.request.name for a in actions if isinstance(a, ServeJudge)]


# --- grace -------------------------------------------------------------------------------------


def test_serves_nothing_during_the_grace_after_the_first_look() -> None:
    v = view(QWEN_4B)

    first, state = plan(KeeperState(), v, NOW)
    almost, state = plan(state, v, AFTER_GRACE - timedelta(seconds=1))
    at_end, state = plan(state, v, AFTER_GRACE)

    assert first == [] and almost == []
    assert served(at_end) == [QWEN_4B]
    assert state.first == NOW


def test_zero_grace_serves_at_once() -> None:
    actions, _ = plan(KeeperState(), view(QWEN_4B, grace=timedelta(0)), NOW)

    assert served(actions) == [QWEN_4B]


def test_grace_runs_from_the_first_look_as_leader() -> None:
    state = KeeperState()
    _, state = plan(state, view(QWEN_4B, leader=False), NOW)
    _, state = plan(state, view(QWEN_4B), NOW + timedelta(hours=1))

    actions, _ = plan(state, view(QWEN_4B), NOW + timedelta(hours=1, minutes=5))

    assert actions == []
    assert state.first == NOW + timedelta(hours=1)


# --- what is served ----------------------------------------------------------------------------


def test_a_cpu_judge_is_served_as_init_sizes_it_and_gives_way_to_an_entry_added_meanwhile() -> None:
    actions, state = looked_at(view(QWEN_4B), NOW, AFTER_GRACE)

    spec = KNOWN[QWEN_4B]
    assert actions == [
        ServeJudge(
            ServeRequest(
                name=QWEN_4B,
                source=HubSource(repo=spec.repo, file=spec.file),
                profiles=[Profile(name="cpu", engine=Engine.LLAMACPP, args=TODAYS_ARGS, cpu_cores=2,
                                  min_memory_gb=4.0)],
                scaling=Scaling(min=2, max=4),
                guard=True,
                if_absent=True,
                by=SERVED_BY,
            )
        )
    ]
    assert state.tried == {QWEN_4B: AFTER_GRACE}


def test_wanted_judges_are_the_union_of_enabled_policies_in_order() -> None:
    v = view(policies=[
        judge_policy(QWEN_4B, DEFAULT_JUDGE),
        judge_policy("llama-guard-3-1b", name="b"),
        judge_policy(QWEN_4B, name="c"),
        judge_policy(QWEN_8B, name="off", enabled=False),
    ])

    actions, _ = looked_at(v, NOW, AFTER_GRACE)

    assert served(actions) == ["llama-guard-3-1b", DEFAULT_JUDGE, QWEN_4B]


def test_judge_memory_by_file_size() -> None:
    assert judge_memory_gb(KNOWN[DEFAULT_JUDGE].size_gb) == 2.0
    assert judge_memory_gb(KNOWN["llama-guard-3-1b"].size_gb) == 4.0
    assert judge_memory_gb(KNOWN[QWEN_4B].size_gb) == 4.0
    assert judge_memory_gb(KNOWN[QWEN_8B].size_gb) == 7.0


def test_a_judge_in_the_catalog_is_not_served() -> None:
    actions, _ = looked_at(view(DEFAULT_JUDGE, models=[todays_init_judge_model()]), NOW, AFTER_GRACE)

    assert actions == []


# --- retry -------------------------------------------------------------------------------------


def test_a_judge_asked_for_is_not_asked_again_within_the_retry_period() -> None:
    _, state = looked_at(view(QWEN_4B), NOW, AFTER_GRACE)
    failed = view(QWEN_4B, jobs=[judge_job(QWEN_4B, JobState.FAILED, id="job-1", by=SERVED_BY)])

    soon, state = plan(state, failed, AFTER_GRACE + JUDGE_RETRY - timedelta(seconds=1))
    later, state = plan(state, failed, AFTER_GRACE + JUDGE_RETRY)

    assert soon == []
    assert served(later) == [QWEN_4B]
    assert state.tried[QWEN_4B] == AFTER_GRACE + JUDGE_RETRY


# --- busy --------------------------------------------------------------------------------------


@pytest.mark.parametrize("job_state", [JobState.QUEUED, JobState.FETCHING, JobState.ADDING])
def test_a_judge_a_job_is_working_on_is_not_asked_for(job_state: JobState) -> None:
    actions, state = looked_at(view(QWEN_4B, jobs=[judge_job(QWEN_4B, job_state)]), NOW, AFTER_GRACE)

    assert actions == []
    assert QWEN_4B not in state.tried


@pytest.mark.parametrize("job_state", [JobState.FAILED, JobState.CANCELLED, JobState.GAVE_WAY])
def test_a_finished_job_that_left_no_entry_does_not_hold_a_judge_back(job_state: JobState) -> None:
    actions, _ = looked_at(view(QWEN_4B, jobs=[judge_job(QWEN_4B, job_state)]), NOW, AFTER_GRACE)

    assert served(actions) == [QWEN_4B]


# --- the race from the reference's change note -------------------------------------------------


def test_init_still_fetching_its_judge_when_the_grace_ends_gets_no_second_job() -> None:
    init_fetching = view(DEFAULT_JUDGE, jobs=[judge_job(DEFAULT_JUDGE, JobState.FETCHING)])

    actions, state = looked_at(init_fetching, NOW, AFTER_GRACE, AFTER_GRACE + timedelta(minutes=30))

    assert actions == []
    assert state.tried == {}


def test_init_entry_appearing_while_the_keepers_own_job_fetches_ends_the_keepers_part() -> None:
    # The keeper's job (if_absent) then gives way to init's entry when it comes to add it: that is
    # covered by the serve job tests (test_if_absent_gives_way_to_a_model_added_while_it_fetched).
    first, state = looked_at(view(DEFAULT_JUDGE), NOW, AFTER_GRACE)
    assert served(first) == [DEFAULT_JUDGE]
    both = view(DEFAULT_JUDGE, models=[todays_init_judge_model()],
                jobs=[judge_job(DEFAULT_JUDGE, JobState.FETCHING, id="job-keeper", by=SERVED_BY)])

    actions, state = plan(state, both, AFTER_GRACE + timedelta(minutes=1))
    much_later, _ = plan(state, both, AFTER_GRACE + timedelta(hours=2))

    assert actions == [] and much_later == []
    assert judge_status(state, both, AFTER_GRACE + timedelta(minutes=1)) == {DEFAULT_JUDGE: "in catalog"}


# --- a judge removed by mistake ----------------------------------------------------------------


def test_a_judge_removed_by_mistake_comes_back() -> None:
    _, state = looked_at(view(QWEN_4B), NOW, AFTER_GRACE)
    present = view(QWEN_4B, models=[judge_model(QWEN_4B, profiles=[judge_profile(args=TODAYS_ARGS)])])
    kept, state = plan(state, present, AFTER_GRACE + timedelta(hours=1))

    removed, _ = plan(state, view(QWEN_4B), AFTER_GRACE + timedelta(hours=2))

    assert kept == []
    assert served(removed) == [QWEN_4B]


# --- judges llmgw does not know ----------------------------------------------------------------


def test_an_unknown_judge_is_said_once_and_never_served() -> None:
    v = view("acme-guard")

    first, state = plan(KeeperState(), v, NOW)
    later = [plan(state, v, AFTER_GRACE + timedelta(hours=h))[0] for h in range(3)]

    assert first == [Say("acme-guard", "a policy names acme-guard, a judge llmgw does not know; enable it "
                                       "with llmgw ctl guard judge enable --repo OWNER/REPO "
                                       "--file FILE.gguf --name acme-guard")]
    assert later == [[], [], []]


def test_a_judge_enabled_by_repo_is_served_from_its_repo() -> None:
    actions, _ = looked_at(view("acme-guard", enabled={"acme-guard": repo_judge()}), NOW, AFTER_GRACE)

    assert [a.request.source for a in actions if isinstance(a, ServeJudge)] == [
        HubSource(repo="acme/acme-guard-GGUF", file="acme-guard.Q4_K_M.gguf")
    ]


def test_the_demo_judge_is_said_once_and_not_fetched() -> None:
    v = view(DEMO_JUDGE)

    actions, state = looked_at(v, NOW, AFTER_GRACE)
    again, _ = plan(state, v, AFTER_GRACE + JUDGE_RETRY)

    assert served(actions) == [] and again == []
    assert [a.judge for a in plan(KeeperState(), v, NOW)[0] if isinstance(a, Say)] == [DEMO_JUDGE]


# --- GPU judges --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "chosen"),
    [
        ({"l4": 1, "a100": 3}, "a100"),
        ({"l4": 2, "a100": 2}, "a100"),
        ({"t4": 0, "l4": 0}, "l4"),
        ({}, None),
    ],
)
def test_the_gpu_class_with_most_free_gpus_is_chosen_ties_alphabetical(
    free: dict[str, int], chosen: str | None
) -> None:
    assert roomiest_gpu_class(free) == chosen


def test_a_gpu_judge_is_served_on_the_roomiest_class() -> None:
    actions, _ = looked_at(view(QWEN_8B, gpu_free_by_class={"l4": 1, "h100": 2, "a100": 2}), NOW, AFTER_GRACE)

    [serve] = [a for a in actions if isinstance(a, ServeJudge)]
    [profile] = serve.request.profiles
    assert (profile.name, profile.gpu_class, profile.gpu) == ("gpu", "a100", 1)
    assert profile.args[:6] == TODAYS_ARGS
    assert serve.request.scaling == Scaling(min=1, max=1)


def test_a_gpu_judge_on_a_cluster_without_gpus_is_warned_once_a_retry_period_and_not_served() -> None:
    v = view(QWEN_8B)

    first, state = looked_at(v, NOW, AFTER_GRACE)
    soon, state = plan(state, v, AFTER_GRACE + timedelta(minutes=5))
    later, _ = plan(state, v, AFTER_GRACE + JUDGE_RETRY)

    assert [a for a in first if isinstance(a, Warn)] == [
        Warn(QWEN_8B, "a policy names qwen3guard-8b, a judge that runs on a GPU, and this "
                      "cluster has none; the default judge qwen3guard-0.6b is used instead")]
    assert soon == []
    assert later == first


def test_a_gpu_judge_without_a_gpu_has_the_default_judge_served_in_its_place() -> None:
    # The warning says the default judge is used instead: it must be there to be used.
    v = view(QWEN_8B, node_cores=node_cores(2))

    actions, _ = looked_at(v, NOW, AFTER_GRACE)

    assert served(actions) == [DEFAULT_JUDGE]
    [serve] = [a for a in actions if isinstance(a, ServeJudge)]
    assert serve.request == judge_request(KNOWN[DEFAULT_JUDGE], [2])  # served as usual
    assert judge_status(KeeperState(first=NOW), v, AFTER_GRACE)[DEFAULT_JUDGE] == (
        "to be served on the keeper's next look")


@pytest.mark.parametrize("over", [
    {"gpu_free_by_class": {"l4": 0}},  # the cluster has a GPU (busy now): the GPU judge is served
    {"policies": [judge_policy(QWEN_4B)]},  # no policy names a GPU judge
])
def test_the_default_judge_is_not_served_when_nothing_needs_its_stand_in(over: dict[str, Any]) -> None:
    actions, _ = looked_at(view(QWEN_8B, **over), NOW, AFTER_GRACE)
    assert DEFAULT_JUDGE not in served(actions)


# --- refit of an earlier init's judge ----------------------------------------------------------


def test_the_judge_an_earlier_init_installed_is_refitted_once_and_restarted() -> None:
    v = view(DEFAULT_JUDGE, models=[init_judge_model(cores=1, replicas=2)],
             replica_ids={DEFAULT_JUDGE: ["rep-1", "rep-2"], "other": ["rep-3"]})

    actions, state = plan(KeeperState(), v, NOW)
    again, _ = plan(state, v, NOW + timedelta(minutes=1))

    assert actions == [
        Refit(DEFAULT_JUDGE,
              [judge_profile(args=TODAYS_ARGS, cores=2, memory_gb=2.0)],
              REFIT_BY,
              ["rep-1", "rep-2"])
    ]
    assert again == []


@pytest.mark.parametrize(
    ("replicas", "cores", "expected"),
    [(1, node_cores(2), 2), (1, node_cores(16), 4), (2, node_cores(16), 2), (2, node_cores(2), 1)],
)
def test_a_refit_judge_gets_the_cores_init_gives_today(
    replicas: int, cores: list[int], expected: int
) -> None:
    v = view(DEFAULT_JUDGE, models=[init_judge_model(replicas=replicas, memory_gb=4.0)], node_cores=cores)

    [refit], _ = plan(KeeperState(), v, NOW)

    assert isinstance(refit, Refit)
    assert refit.profiles[0].cpu_cores == expected
    assert refit.profiles[0].min_memory_gb == 2.0


def test_a_hand_set_judge_is_left_as_it_is_and_said_once() -> None:
    v = view(DEFAULT_JUDGE, models=[hand_set_judge_model()])

    first, state = plan(KeeperState(), v, NOW)
    again, _ = plan(state, v, AFTER_GRACE)

    assert first == [Say(DEFAULT_JUDGE, "the judge's profile is not one init wrote; left as it is "
                                        "(see llmgw ctl model resources qwen3guard-0.6b)")]
    assert again == []


@pytest.mark.parametrize(
    "model",
    [
        todays_init_judge_model(),
        # One profile without the prompt cache, however sized, is left quietly.
        judge_model(profiles=[judge_profile(args=TODAYS_ARGS, cores=8, memory_gb=6.0)]),
    ],
)
def test_a_judge_with_todays_profile_is_left_without_a_word(model: Model) -> None:
    assert plan(KeeperState(), view(DEFAULT_JUDGE, models=[model]), NOW)[0] == []


@pytest.mark.parametrize(
    "model",
    [
        init_judge_model().model_copy(update={"guard": False}),
        judge_model(QWEN_4B, profiles=[judge_profile(args=["--ctx-size", "8192"])]),
    ],
)
def test_only_the_default_judge_as_a_guard_model_is_refitted(model: Model) -> None:
    assert plan(KeeperState(), view(DEFAULT_JUDGE, QWEN_4B, models=[model]), NOW)[0] == []


def test_an_entry_with_two_profiles_is_left_and_said() -> None:
    two = judge_model(profiles=[judge_profile(args=["--ctx-size", "8192"]),
                                judge_profile(name="gpu", args=TODAYS_ARGS, gpu=1, gpu_class="l4")])

    actions, _ = plan(KeeperState(), view(DEFAULT_JUDGE, models=[two]), NOW)

    assert [type(a) for a in actions] == [Say]


# --- refit cores -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "cores", "expected"),
    [
        (1, node_cores(), 2),  # no node known yet
        (1, node_cores(2), 2),
        (1, node_cores(16), 4),
        (1, node_cores(16, 2), 2),  # the smallest node decides
        (2, node_cores(), 2),
        (2, node_cores(16), 2),
        (2, node_cores(2), 1),  # one small node: both replicas share it
        (2, node_cores(3), 1),
        (3, node_cores(4), 1),
        (2, node_cores(2, 2), 2),  # several nodes: one replica on each
        (2, node_cores(16, 16), 2),
        (0, node_cores(16), 4),
    ],
)
def test_refit_cores(replicas: int, cores: list[int], expected: int) -> None:
    assert refit_cores(replicas, cores) == expected


def test_a_served_judge_on_one_small_node_gets_the_cores_it_can_share() -> None:
    actions, _ = looked_at(view(QWEN_4B, node_cores=node_cores(2)), NOW, AFTER_GRACE)

    [serve] = [a for a in actions if isinstance(a, ServeJudge)]
    assert serve.request.profiles[0].cpu_cores == 1


# --- leader and guard --------------------------------------------------------------------------


@pytest.mark.parametrize("over", [{"leader": False}, {"guard_on": False}])
def test_a_follower_or_a_guard_that_is_off_does_nothing(over: dict[str, Any]) -> None:
    v = view(QWEN_4B, "acme-guard", models=[init_judge_model()], grace=timedelta(0), **over)

    actions, state = plan(KeeperState(), v, NOW)

    assert actions == []
    assert state == KeeperState()


# --- status ------------------------------------------------------------------------------------


def test_status_says_what_the_keeper_does_about_each_judge() -> None:
    judges = [DEFAULT_JUDGE, QWEN_4B, "llama-guard-3-1b", QWEN_8B, "acme-guard", DEMO_JUDGE]
    v = view(*judges, models=[todays_init_judge_model()],
             jobs=[judge_job("llama-guard-3-1b", JobState.FETCHING, id="job-7")])

    _, state = plan(KeeperState(), v, NOW)
    in_grace = judge_status(state, v, NOW)
    _, state = plan(state, v, AFTER_GRACE)
    after = judge_status(state, v, AFTER_GRACE)

    assert in_grace[QWEN_4B] == "in grace until 2026-01-01T00:10:00+00:00"
    assert after == {
        DEFAULT_JUDGE: "in catalog",
        QWEN_4B: "retry at 2026-01-01T00:20:00+00:00",
        "llama-guard-3-1b": "fetching (job job-7)",
        QWEN_8B: "needs a GPU, and this cluster has none; qwen3guard-0.6b is used instead",
        "acme-guard": "unknown: enable it with llmgw ctl guard judge enable --repo OWNER/REPO "
                                       "--file FILE.gguf --name acme-guard",
        DEMO_JUDGE: "the demo judge comes with llmgw server init --demo; it is not fetched",
    }


def test_status_names_the_failed_job_and_the_next_look() -> None:
    _, state = looked_at(view(QWEN_4B), NOW, AFTER_GRACE)
    failed = judge_job(QWEN_4B, JobState.FAILED, id="job-9", by=SERVED_BY).model_copy(
        update={"error": "repo not found"})
    v = view(QWEN_4B, jobs=[failed])

    assert judge_status(state, v, AFTER_GRACE) == {
        QWEN_4B: "retry at 2026-01-01T00:20:00+00:00 (job job-9 failed: repo not found)"
    }
    assert judge_status(state, v, AFTER_GRACE + JUDGE_RETRY) == {
        QWEN_4B: "to be served on the keeper's next look"
    }
    assert judge_status(KeeperState(), v, NOW) == {QWEN_4B: "waiting for the keeper's first look"}
    assert judge_status(state, view(QWEN_4B, leader=False), NOW) == {
        QWEN_4B: "not kept here: the leader keeps the judges"
    }


# --- the loop ----------------------------------------------------------------------------------


class RecordingLog:
    """A logger that keeps what it was told."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def info(self, msg: str, *args: object) -> None:
        self.lines.append(("info", msg % args))

    def warning(self, msg: str, *args: object) -> None:
        self.lines.append(("warning", msg % args))

    def error(self, msg: str, *args: object) -> None:
        self.lines.append(("error", msg % args))

    def said(self, level: str, *words: str) -> int:
        return sum(1 for lvl, line in self.lines if lvl == level and all(w in line for w in words))


class World:
    """The catalog, jobs and replicas the keeper reads and changes, in memory."""

    def __init__(self, v: KeeperView) -> None:
        self.view = v
        self.served: list[ServeRequest] = []
        self.refitted: list[tuple[str, list[Profile], str]] = []
        self.restarted: list[list[str]] = []
        self.published: list[KeeperState] = []
        self.on_publish = asyncio.Event()
        self.refit_failures = 0
        self.restart_failures = 0
        self.serve_failures = 0

    def keeper(self, clock: FakeClock, log: RecordingLog) -> JudgeKeeper:
        return JudgeKeeper(self.read, self.serve, self.refit, self.restart, clock, log, self.publish)

    async def read(self) -> KeeperView:
        return self.view

    async def serve(self, request: ServeRequest) -> None:
        if self.serve_failures:
            self.serve_failures -= 1
            raise RuntimeError("store is down")
        self.served.append(request)

    async def refit(self, model: str, profiles: list[Profile], by: str) -> None:
        if self.refit_failures:
            self.refit_failures -= 1
            raise RuntimeError("database is locked")
        self.refitted.append((model, profiles, by))

    async def restart(self, ids: list[str]) -> None:
        if self.restart_failures:
            self.restart_failures -= 1
            raise RuntimeError("database is locked")
        self.restarted.append(ids)

    async def publish(self, state: KeeperState) -> None:
        self.published.append(state)
        self.on_publish.set()


async def test_tick_applies_and_logs_each_action_once_and_retries_a_failed_refit() -> None:
    clock = FakeClock(NOW)
    world = World(view(QWEN_4B, QWEN_8B, "acme-guard", models=[init_judge_model()],
                       replica_ids={DEFAULT_JUDGE: ["rep-1"]}))
    world.refit_failures = 1
    log = RecordingLog()
    keeper = world.keeper(clock, log)

    await keeper.tick()
    assert world.refitted == []
    assert log.said("warning", "could not refit judge qwen3guard-0.6b", "database is locked") == 1
    assert log.said("info", "acme-guard", "enable") == 1

    clock.advance(60)
    await keeper.tick()
    assert [(m, by) for m, _, by in world.refitted] == [(DEFAULT_JUDGE, REFIT_BY)]
    assert world.restarted == [["rep-1"]]
    assert log.said("info", "refitted judge qwen3guard-0.6b") == 1
    assert world.served == []

    clock.advance(JUDGE_GRACE.total_seconds())
    world.serve_failures = 1
    await keeper.tick()
    assert world.served == []
    assert log.said("error", "could not start serving judge qwen3guard-4b", "store is down") == 1
    assert log.said("warning", QWEN_8B, "GPU") == 1

    clock.advance(JUDGE_RETRY.total_seconds())
    await keeper.tick()
    await keeper.tick()
    assert [r.name for r in world.served] == [QWEN_4B]
    assert log.said("info", "acme-guard", "enable") == 1
    assert len(world.refitted) == 1
    assert await keeper.status() == {
        DEFAULT_JUDGE: "in catalog",
        QWEN_4B: "retry at 2026-01-01T00:31:00+00:00",
        QWEN_8B: "needs a GPU, and this cluster has none; qwen3guard-0.6b is used instead",
        "acme-guard": "unknown: enable it with llmgw ctl guard judge enable --repo OWNER/REPO "
                                       "--file FILE.gguf --name acme-guard",
    }


async def test_run_looks_until_cancelled() -> None:
    world = World(view(QWEN_4B, grace=timedelta(0)))
    keeper = world.keeper(FakeClock(NOW), RecordingLog())

    task = asyncio.create_task(keeper.run(interval_s=0.01))
    for _ in range(100):
        if world.served:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert [r.name for r in world.served] == [QWEN_4B]


def test_the_keepers_judge_goes_to_the_judge_machine_like_inits() -> None:
    # Whichever entry lands (init's or the keeper's), the judge runs on the judge machine: the
    # change note's second judge off the judge machine cannot happen.
    actions, _ = plan(KeeperState(), view(QWEN_4B, grace=timedelta(0),
                                          judge_node_selector={"role": "judge"}), NOW)

    [serve] = [a for a in actions if isinstance(a, ServeJudge)]
    assert [p.node_selector for p in serve.request.profiles] == [{"role": "judge"}]
    assert serve.request.if_absent


# --- an entry that cannot be served ------------------------------------------------------------


def test_a_judge_enabled_with_a_traversing_repo_is_said_once_and_the_others_are_served() -> None:
    # Stored before the API checked it: it must not stop the keeper serving the other judges.
    bad = JudgeSpec(name="evil", repo="../x", file="../../y", size_gb=1.0)
    v = view("evil", QWEN_4B, enabled={"evil": bad}, grace=timedelta(0))

    first, state = plan(KeeperState(), v, NOW)
    later, state = plan(state, v, NOW + JUDGE_RETRY)

    assert served(first) == [QWEN_4B]
    [warn] = [a for a in first if isinstance(a, Warn)]
    assert warn.judge == "evil" and "repo" in warn.message and "enable it again" in warn.message
    assert [a for a in later if isinstance(a, Warn)] == []
    assert judge_status(state, v, NOW)["evil"].startswith("cannot be served as enabled")


async def test_a_bad_entry_never_stops_the_keepers_pass() -> None:
    bad = JudgeSpec(name="evil", repo="acme/x", file="a/../../../etc/passwd", size_gb=1.0)
    world = World(view("evil", QWEN_4B, enabled={"evil": bad}, grace=timedelta(0)))
    log = RecordingLog()
    keeper = world.keeper(FakeClock(NOW), log)

    await keeper.tick()
    await keeper.tick()

    assert [r.name for r in world.served] == [QWEN_4B]
    assert log.said("warning", "evil", "cannot serve this judge", "file") == 1


# --- a refit whose restart failed --------------------------------------------------------------


def test_a_refitted_judge_not_yet_restarted_is_restarted_on_the_next_look() -> None:
    v = view(DEFAULT_JUDGE, models=[todays_init_judge_model()],
             replica_ids={DEFAULT_JUDGE: ["rep-1", "rep-2"]})
    state = KeeperState(looked=frozenset({DEFAULT_JUDGE})).restart_later(DEFAULT_JUDGE)

    actions, state = plan(state, v, NOW)
    again, _ = plan(state, v, NOW + timedelta(minutes=1))

    assert actions == [Restart(DEFAULT_JUDGE, ["rep-1", "rep-2"])]
    assert again == []


async def test_a_refit_whose_restart_fails_is_said_and_restarted_on_the_next_pass() -> None:
    clock = FakeClock(NOW)
    world = World(view(DEFAULT_JUDGE, models=[init_judge_model()], replica_ids={DEFAULT_JUDGE: ["rep-1"]}))
    world.restart_failures = 1
    log = RecordingLog()
    keeper = world.keeper(clock, log)

    await keeper.tick()
    assert len(world.refitted) == 1 and world.restarted == []
    assert log.said("warning", "refitted judge qwen3guard-0.6b", "but could not restart it",
                    "database is locked") == 1

    # The catalog now holds the refitted profile: only the restart is left to do.
    world.view = replace(world.view, models=[todays_init_judge_model()])
    clock.advance(5)
    await keeper.tick()
    await keeper.tick()
    assert len(world.refitted) == 1 and world.restarted == [["rep-1"]]
    assert log.said("info", "restarted judge qwen3guard-0.6b") == 1


# --- the state other servers read --------------------------------------------------------------


async def test_the_keeper_publishes_its_state_when_it_changes() -> None:
    clock = FakeClock(NOW)
    world = World(view(QWEN_4B))
    keeper = world.keeper(clock, RecordingLog())

    await keeper.tick()
    await keeper.tick()
    clock.advance(JUDGE_GRACE.total_seconds())
    await keeper.tick()

    assert world.published == [KeeperState(first=NOW), keeper.state]
    assert keeper.state.tried == {QWEN_4B: AFTER_GRACE}


async def test_a_keeper_elected_again_publishes_its_state_again() -> None:
    # Another leader may have published its own state while this server did not lead.
    world = World(view(QWEN_4B))
    keeper = world.keeper(FakeClock(NOW), RecordingLog())
    await keeper.tick()
    world.on_publish.clear()

    task = asyncio.create_task(keeper.run(interval_s=60))
    try:
        await asyncio.wait_for(world.on_publish.wait(), 5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    assert world.published == [KeeperState(first=NOW)] * 2


# --- scaling with the judgments ---------------------------------------------------------------


def busy_judge_view(**over: Any) -> KeeperView:
    """The default judge in the catalog (floor 2, max 4) with judgments waiting for its slots."""
    model = todays_init_judge_model().model_copy(update={"scaling": Scaling(min=2, max=4)})
    fields: dict[str, Any] = {
        "models": [model], "replica_ids": {DEFAULT_JUDGE: ["rep-1", "rep-2"]},
        "room": {DEFAULT_JUDGE: True},
        "judge_loads": {DEFAULT_JUDGE: JudgeLoad(slots=4, in_flight=4, queued=6, waited=50, shed=3)},
    }
    return view(**{**fields, **over})


def test_judgments_queued_for_the_window_add_a_judge_replica() -> None:
    v = busy_judge_view()
    window = [NOW + timedelta(seconds=s) for s in range(0, 31, 5)]
    actions, state = looked_at(v, *window[:-1])
    assert not [a for a in actions if isinstance(a, Scale)]
    actions, state = plan(state, v, window[-1])
    assert [a for a in actions if isinstance(a, Scale)] == [
        Scale(DEFAULT_JUDGE, 3, "judgments queued or shed for 30 s (6 waiting now, 0 waited and "
                                "0 shed since the last look)")]
    assert state.targets() == {DEFAULT_JUDGE: 3}
    status = judge_status(state, v, window[-1])
    assert status[DEFAULT_JUDGE] == "in catalog"
    assert "added one" in state.scales[DEFAULT_JUDGE].note


def test_a_judge_no_policy_names_is_not_scaled() -> None:
    v = busy_judge_view(policies=[judge_policy(QWEN_4B)])
    _, state = looked_at(v, *(NOW + timedelta(seconds=s) for s in range(0, 61, 5)))
    assert state.targets() == {}


async def test_a_scale_wakes_the_replica_keeper_and_is_logged() -> None:
    clock = FakeClock(NOW)
    world = World(busy_judge_view())
    log = RecordingLog()
    woken: list[bool] = []
    keeper = JudgeKeeper(world.read, world.serve, world.refit, world.restart, clock, log,
                         world.publish, on_scale=lambda: woken.append(True))
    for _ in range(7):
        await keeper.tick()
        clock.advance(5)
    assert woken == [True]
    assert keeper.targets() == {DEFAULT_JUDGE: 3}
    assert log.said("info", "judge qwen3guard-0.6b to 3 replicas", "queued or shed") == 1
