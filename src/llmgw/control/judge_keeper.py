"""The judge keeper: on the leader, serves each judge a guard policy names and the catalog lacks.

Naming a judge llmgw knows in a policy is all it takes to have it served, and a judge removed by
mistake comes back. A judge llmgw does not know is left to `llmgw ctl guard judge enable --repo`.
A judge that needs a GPU the cluster does not have is not served: the default judge is, and the
guard asks it in the GPU judge's place. The keeper also refits, once, the default judge an earlier
`server init` installed with a profile that missed every judgment's budget on small machines, and
restarts its replicas on a later look when they could not be restarted then.

Two actors may want the same judge: `server init` adds its own just after the control plane
starts. So the keeper serves nothing during a grace period after its first look, never starts a
second job for a judge a job is already fetching, and asks for its judge with `if_absent`, so an
entry added meanwhile (by init or an operator) is the one that stays.

The keeper also scales the judges it keeps with their load (`judge_scaling`): judgments queued
or shed for a window add a replica up to the judge's `scaling.max`, calm removes one down to its
`scaling.min`; the replica keeper places what it decides.

`plan` is pure: the keeper's memory and a view of the world in, actions and the updated memory
out. `judge_status` says, just as purely, what the keeper is doing about each judge.
`JudgeKeeper` (in `judge_loop`) reads the view, calls `plan`, applies the actions and logs each
once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from pydantic import ValidationError

from llmgw.control.judge_scaling import (
    JUDGE_IDLE,
    JUDGE_SCALE_WINDOW,
    JudgeCapacity,
    JudgeScale,
    Scale,
    decide,
)
from llmgw.core.guard import JudgeLoad, JudgeSpec, Policy
from llmgw.core.judges import DEFAULT_JUDGE, DEMO_JUDGE
from llmgw.core.protocol.models import JobState, ServeJob, ServeRequest
from llmgw.core.types import Engine, HubSource, Model, Profile, Scaling

logger = logging.getLogger(__name__)

# How long after its first look (as leader, with the guard on) the keeper serves no judge itself:
# init adds its judge, sized and placed as the install says, just after the control plane starts.
JUDGE_GRACE = timedelta(minutes=10)
# How long a judge that was asked for waits before it is asked for again (a fetch that failed,
# a cluster without the GPU it needs).
JUDGE_RETRY = timedelta(minutes=10)

# Cores per judge replica where a cluster runs several, and for the cluster's one judge replica.
JUDGE_CORES = 2
JUDGE_CORES_ALONE = 4
# Replicas of a CPU judge the keeper serves: one can restart while the other answers. It scales
# with its judgments up to JUDGE_MAX_REPLICAS where the scheduler finds room (`judge_scaling`).
JUDGE_REPLICAS = 2
JUDGE_MAX_REPLICAS = 4
# A GPU judge gets one replica: a second would take a second GPU, which is the operator's call.
GPU_JUDGE_REPLICAS = 1

# Memory reserved per judge replica, by the size of its GGUF file, with an 8192-token context and
# no prompt cache: 2 GB for files of up to 1 GB (qwen3guard-0.6b), 4 GB for files of up to 3 GB
# (llama-guard-3-1b, qwen3guard-4b); a bigger file gets its size rounded up plus 2 GB.
JUDGE_MEMORY_GB = 2.0
JUDGE_MEMORY_GB_LARGE = 4.0

# llama.cpp's prompt cache held memory and slowed every judgment on small machines: judges run
# without it. Two slots, said rather than left to llama-server, so the gateway admits judgments
# to exactly the slots there are and pins each to the slot whose KV cache holds its prompt.
JUDGE_ARGS = ("--ctx-size", "8192", "--cache-ram", "0", "--parallel", "2")
# Every layer on the GPU (llama.cpp caps the count at the model's layers).
GPU_ARGS = ("--n-gpu-layers", "999")
# What an earlier init wrote for its judge.
EARLIER_INIT_ARGS = ("--ctx-size", "8192")

SERVED_BY = "llmgw (a guard policy names it)"
REFIT_BY = "llmgw (the judge an earlier init installed)"
ENABLE_COMMAND = "llmgw ctl guard judge enable --repo OWNER/REPO --file FILE.gguf --name {name}"


@dataclass(frozen=True)
class KeeperState:
    """What the keeper remembers between looks; `plan` returns a new one, never changes this."""

    # The keeper's first look (as leader, with the guard on); its grace runs from here.
    first: datetime | None = None
    # When each judge was last asked for.
    tried: Mapping[str, datetime] = field(default_factory=dict)
    # Models already refitted, or found set by hand: each is looked at once.
    looked: frozenset[str] = frozenset()
    # Judges already said to be left to the operator: each is said once.
    said: frozenset[str] = frozenset()
    # Judges whose entry cannot be served as it stands (say a bad repo stored before it was
    # checked): each is said once, and the others are served all the same.
    broken: frozenset[str] = frozenset()
    # Models refitted whose replicas could not be restarted: restarted on the next look.
    unrestarted: frozenset[str] = frozenset()
    # Each kept judge's scale: the replicas it should have, and its load as last seen.
    scales: Mapping[str, JudgeScale] = field(default_factory=dict)

    def targets(self) -> dict[str, int]:
        """The replicas each kept judge should have (what the replica keeper places)."""
        return {name: s.replicas for name, s in self.scales.items()}

    def forget_refit(self, model: str) -> KeeperState:
        """Look at `model` again on the next look (its refit failed)."""
        return replace(self, looked=self.looked - {model})

    def restart_later(self, model: str) -> KeeperState:
        """Restart `model`'s replicas on the next look (they could not be restarted now)."""
        return replace(self, unrestarted=self.unrestarted | {model})


@dataclass(frozen=True)
class KeeperView:
    """What the keeper sees on one look: plain data read by the loop."""

    leader: bool = True
    guard_on: bool = True
    policies: list[Policy] = field(default_factory=list)
    models: list[Model] = field(default_factory=list)  # the catalog
    jobs: list[ServeJob] = field(default_factory=list)
    known: Mapping[str, JudgeSpec] = field(default_factory=dict)  # the judge library
    enabled: Mapping[str, JudgeSpec] = field(default_factory=dict)  # `ctl guard judge enable --repo`
    node_cores: list[int] = field(default_factory=list)
    # Free GPUs by class; list every class the cluster has, even one with none free.
    gpu_free_by_class: Mapping[str, int] = field(default_factory=dict)
    replica_ids: Mapping[str, list[str]] = field(default_factory=dict)  # model -> its replicas
    # `server init --judge-node`: the labels of the judge machine. The keeper's judges go there
    # too, so whichever of init's entry and the keeper's lands, the judge runs on that machine.
    judge_node_selector: Mapping[str, str] = field(default_factory=dict)
    grace: timedelta = JUDGE_GRACE
    retry: timedelta = JUDGE_RETRY
    # Judgments by judge, summed over the live servers' judge admission.
    judge_loads: Mapping[str, JudgeLoad] = field(default_factory=dict)
    starting: Mapping[str, int] = field(default_factory=dict)  # model -> replicas not ready yet
    room: Mapping[str, bool] = field(default_factory=dict)  # model -> one more would be placed
    scale_window: timedelta = JUDGE_SCALE_WINDOW
    scale_idle: timedelta = JUDGE_IDLE


@dataclass(frozen=True)
class ServeJudge:
    """Start a serve job for a judge a policy names and the catalog lacks."""

    request: ServeRequest


@dataclass(frozen=True)
class Warn:
    """A judge that cannot be served as it is named."""

    judge: str
    message: str


@dataclass(frozen=True)
class Refit:
    """Give a model new profiles and restart its replicas onto them."""

    model: str
    profiles: list[Profile]
    by: str
    restart: list[str]


@dataclass(frozen=True)
class Restart:
    """Restart a refitted model's replicas, whose restart failed on an earlier look."""

    model: str
    restart: list[str]


@dataclass(frozen=True)
class Say:
    """Something the operator should hear once."""

    judge: str
    message: str


KeeperAction = ServeJudge | Warn | Refit | Restart | Say | Scale


def plan(state: KeeperState, view: KeeperView, now: datetime) -> tuple[list[KeeperAction], KeeperState]:
    """What to do on this look, and what to remember for the next."""
    if not view.leader or not view.guard_on:
        return [], state
    actions: list[KeeperAction] = []
    have = {m.name for m in view.models}
    for name in sorted(state.unrestarted & have):
        if ids := list(view.replica_ids.get(name, [])):
            actions.append(Restart(name, ids))
    looked = set(state.looked)
    for model in view.models:
        if model.name in looked or not _refittable(model):
            continue
        looked.add(model.name)
        actions += _refit(model, view)
    first = state.first or now
    in_grace = now - first < view.grace
    said = set(state.said)
    broken = set(state.broken)
    tried = dict(state.tried)
    busy = _busy(view.jobs)
    for name in kept_judges(view):
        if name in have:
            continue
        spec = _spec(view, name)
        if name == DEMO_JUDGE or spec is None:
            # Words, not serving: the grace does not hold them back.
            if name not in said:
                said.add(name)
                actions.append(Say(name, _left_to_operator(name)))
            continue
        if in_grace or name in busy:
            continue
        asked = tried.get(name)
        if asked is not None and now - asked < view.retry:
            continue
        # Recorded before the GPU check too, so a cluster without one is warned once a retry period.
        tried[name] = now
        gpu_class: str | None = None
        if spec.gpu:
            gpu_class = roomiest_gpu_class(view.gpu_free_by_class)
            if gpu_class is None:
                actions.append(Warn(name, _no_gpu(name)))
                continue
        try:
            request = judge_request(spec, view.node_cores, gpu_class, view.judge_node_selector)
        except ValueError as exc:  # an entry stored before it was checked: the others go on
            if name not in broken:
                broken.add(name)
                actions.append(Warn(name, f"cannot serve this judge as it is enabled: {_reason(exc)}; "
                                          "enable it again with a valid --repo and --file"))
            continue
        actions.append(ServeJudge(request))
    scales = _scale(state, view, now, actions)
    return actions, KeeperState(first=first, tried=tried, looked=frozenset(looked), said=frozenset(said),
                                broken=frozenset(broken), scales=scales)


def _scale(state: KeeperState, view: KeeperView, now: datetime,
           actions: list[KeeperAction]) -> dict[str, JudgeScale]:
    """Each kept judge in the catalog scaled with its load (see `judge_scaling`)."""
    models = {m.name: m for m in view.models}
    scales: dict[str, JudgeScale] = {}
    for name in kept_judges(view):
        model = models.get(name)
        if model is None or not model.guard or model.is_remote:
            continue
        cap = JudgeCapacity(
            floor=model.scaling.min, most=model.scaling.max,
            live=len(view.replica_ids.get(name, [])), starting=view.starting.get(name, 0),
            room=view.room.get(name, False), load=view.judge_loads.get(name, JudgeLoad()),
        )
        action, scales[name] = decide(name, cap, state.scales.get(name), now, view.scale_window,
                                      view.scale_idle)
        if action is not None:
            actions.append(action)
    return scales


def judge_status(state: KeeperState, view: KeeperView, now: datetime) -> dict[str, str]:
    """What the keeper is doing about each judge the enabled policies name (`ctl guard judge status`)."""
    have = {m.name for m in view.models}
    busy = _busy(view.jobs)
    status: dict[str, str] = {}
    for name in kept_judges(view):
        status[name] = _status_of(name, state, view, now, have, busy)
    return status


def _status_of(
    name: str, state: KeeperState, view: KeeperView, now: datetime, have: set[str], busy: dict[str, ServeJob]
) -> str:
    if not view.leader:
        return "not kept here: the leader keeps the judges"
    if not view.guard_on:
        return "not kept: the guard is off"
    if name in have:
        return "in catalog"
    spec = _spec(view, name)
    if name == DEMO_JUDGE:
        return "the demo judge comes with llmgw server init --demo; it is not fetched"
    if spec is None:
        return "unknown: enable it with " + ENABLE_COMMAND.format(name=name)
    if name in busy:
        job = busy[name]
        return f"{job.state.value} (job {job.id})"
    if name in state.broken:
        return "cannot be served as enabled: enable it again with a valid --repo and --file"
    if state.first is None:
        return "waiting for the keeper's first look"
    if now - state.first < view.grace:
        return f"in grace until {_at(state.first + view.grace)}"
    if spec.gpu and roomiest_gpu_class(view.gpu_free_by_class) is None:
        return f"needs a GPU, and this cluster has none; {DEFAULT_JUDGE} is used instead"
    asked = state.tried.get(name)
    if asked is not None and now - asked < view.retry:
        failed = _last_failure(view.jobs, name, now)
        return f"retry at {_at(asked + view.retry)}" + (f" ({failed})" if failed else "")
    return "to be served on the keeper's next look"


def wanted_judges(policies: list[Policy]) -> list[str]:
    """Every judge an enabled policy names, sorted."""
    return sorted({j for p in policies if p.enabled for j in p.judges})


def kept_judges(view: KeeperView) -> list[str]:
    """The judges the keeper keeps: every one an enabled policy names and, while one of those
    needs a GPU the cluster does not have, the default judge that answers in its place."""
    wanted = wanted_judges(view.policies)
    if roomiest_gpu_class(view.gpu_free_by_class) is None and any(
        (spec := _spec(view, name)) is not None and spec.gpu for name in wanted
    ):
        return sorted({*wanted, DEFAULT_JUDGE})
    return wanted


def judge_request(
    spec: JudgeSpec, node_cores: list[int], gpu_class: str | None = None,
    node_selector: Mapping[str, str] | None = None, by: str = SERVED_BY,
) -> ServeRequest:
    """The serve request for a judge: on `gpu_class` when given, else on CPUs as init sizes it;
    on the judge machine (`node_selector`) when the install has one."""
    memory = judge_memory_gb(spec.size_gb)
    selector = dict(node_selector or {})
    if gpu_class is not None:
        profile = Profile(name="gpu", engine=Engine.LLAMACPP, args=[*JUDGE_ARGS, *GPU_ARGS],
                          cpu_cores=JUDGE_CORES, min_memory_gb=memory, gpu_class=gpu_class, gpu=1,
                          node_selector=selector)
        replicas = GPU_JUDGE_REPLICAS
    else:
        profile = Profile(name="cpu", engine=Engine.LLAMACPP, args=list(JUDGE_ARGS),
                          cpu_cores=refit_cores(JUDGE_REPLICAS, node_cores), min_memory_gb=memory,
                          node_selector=selector)
        replicas = JUDGE_REPLICAS
    most = JUDGE_MAX_REPLICAS if gpu_class is None else replicas
    return ServeRequest(
        name=spec.name,
        source=HubSource(repo=spec.repo, file=spec.file),
        profiles=[profile],
        scaling=Scaling(min=replicas, max=most),
        guard=True,
        # init, or an operator, may add it while this fetches: theirs stays.
        if_absent=True,
        by=by,
    )


def judge_memory_gb(size_gb: float) -> float:
    """Memory to reserve for one replica of a judge whose GGUF file is `size_gb` (see JUDGE_MEMORY_GB)."""
    if size_gb <= 1.0:
        return JUDGE_MEMORY_GB
    if size_gb <= 3.0:
        return JUDGE_MEMORY_GB_LARGE
    return float(math.ceil(size_gb) + 2)


def refit_cores(replicas: int, node_cores: list[int]) -> int:
    """Cores per judge replica, by init's rule.

    Up to JUDGE_CORES_ALONE for the cluster's one judge replica (JUDGE_CORES when no node is known),
    JUDGE_CORES each where there are more, and fewer when the cluster is one node too small to hold
    them all.
    """
    sizes = [c for c in node_cores if c > 0]
    smallest = min(sizes, default=0)
    if replicas <= 1:
        return min(smallest, JUDGE_CORES_ALONE) if smallest else JUDGE_CORES
    if len(node_cores) == 1 and smallest and replicas * JUDGE_CORES > smallest:
        return max(1, smallest // replicas)
    return JUDGE_CORES


def roomiest_gpu_class(free: Mapping[str, int]) -> str | None:
    """The GPU class with the most free GPUs (ties: alphabetical); None when the cluster has none."""
    if not free:
        return None
    return min(free, key=lambda cls: (-free[cls], cls))


def earlier_init_judge(model: Model) -> bool:
    """Whether a judge's entry is exactly what an earlier `server init` wrote."""
    if len(model.profiles) != 1:
        return False
    p = model.profiles[0]
    return (
        p.name == "cpu"
        and p.engine == Engine.LLAMACPP
        and p.gpu_class is None
        and p.gpu == 0
        and not p.node_selector
        and tuple(p.args) == EARLIER_INIT_ARGS
        and p.min_memory_gb in (2.0, 4.0)
        and 0 <= p.cpu_cores <= 2
    )


def _refittable(model: Model) -> bool:
    return model.name == DEFAULT_JUDGE and model.guard


def _refit(model: Model, view: KeeperView) -> list[KeeperAction]:
    """Refit an earlier init's judge to today's profile; a hand-set one is left, said once."""
    if not earlier_init_judge(model):
        if len(model.profiles) != 1 or "--cache-ram" not in model.profiles[0].args:
            return [Say(model.name, "the judge's profile is not one init wrote; left as it is "
                                    f"(see llmgw ctl model resources {model.name})")]
        return []
    spec = _spec(view, model.name)
    memory = judge_memory_gb(spec.size_gb) if spec else JUDGE_MEMORY_GB
    profile = model.profiles[0].model_copy(update={
        "args": list(JUDGE_ARGS),
        "min_memory_gb": memory,
        "cpu_cores": refit_cores(model.scaling.min, view.node_cores),
    })
    return [Refit(model.name, [profile], REFIT_BY, list(view.replica_ids.get(model.name, [])))]


def _spec(view: KeeperView, name: str) -> JudgeSpec | None:
    # One the operator enabled by repo wins over the library's, under the same name.
    return view.enabled.get(name) or view.known.get(name)


def _busy(jobs: list[ServeJob]) -> dict[str, ServeJob]:
    """Judges a job is still working on (queued, fetching, adding), by the name it serves."""
    return {j.request.name: j for j in jobs if not j.state.finished}


def _last_failure(jobs: list[ServeJob], name: str, now: datetime) -> str | None:
    failed = [j for j in jobs if j.request.name == name and j.state == JobState.FAILED]
    if not failed:
        return None
    job = max(failed, key=lambda j: j.updated_at or j.created_at or now)
    return f"job {job.id} failed: {job.error}" if job.error else f"job {job.id} failed"


def _left_to_operator(name: str) -> str:
    if name == DEMO_JUDGE:
        return (f"a policy names {name}, which comes with llmgw server init --demo and is not "
                "fetched; left as it is")
    return (f"a policy names {name}, a judge llmgw does not know; enable it with "
            + ENABLE_COMMAND.format(name=name))


def _no_gpu(name: str) -> str:
    return (f"a policy names {name}, a judge that runs on a GPU, and this cluster has none; "
            f"the default judge {DEFAULT_JUDGE} is used instead")


def _reason(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return str(exc)


def _at(t: datetime) -> str:
    return t.isoformat(timespec="seconds")
