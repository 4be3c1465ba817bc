"""Whether a profile fits on a node, given what is already placed there (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmgw.core.types import Node, Profile, Replica, ReplicaState


@dataclass(frozen=True)
class Free:
    """What a node has left for new replicas."""

    cores: int
    memory_gb: float
    gpus: dict[str, int] = field(default_factory=dict)

    def minus(self, cores: int, memory_gb: float, gpu_class: str | None, gpus: int) -> Free:
        """What is left after one more replica holding these."""
        left = dict(self.gpus)
        if gpus:
            cls = self.gpu_class_for(gpu_class, gpus)
            left[cls] = left.get(cls, 0) - gpus
        return Free(self.cores - cores, round(self.memory_gb - memory_gb, 3), left)

    def gpu_class_for(self, gpu_class: str | None, count: int) -> str:
        """The class a replica's GPUs come from: its own, or the first with enough free."""
        if gpu_class:
            return gpu_class
        classes = sorted(self.gpus.items())
        return next((c for c, n in classes if n >= count), classes[0][0] if classes else "")


def free_on(node: Node, replicas: list[Replica]) -> Free:
    """A node's capacity minus what its non-stopping replicas hold."""
    free = Free(node.cores, node.memory_gb, dict(node.gpus))
    for r in replicas:
        if r.node_id == node.id and r.state != ReplicaState.STOPPING:
            free = free.minus(r.cpu_cores, r.memory_gb, r.gpu_class, r.gpus)
    return free


def misfit(profile: Profile, node: Node, free: Free) -> str | None:
    """None when `profile` fits on `node` with `free` left; otherwise why it does not."""
    if node.cordoned:
        return f"node {node.id} is cordoned"
    for key, want in profile.node_selector.items():
        if node.labels.get(key) != want:
            return f"node {node.id} lacks label {key}={want}"
    if profile.gpu:
        cls = profile.gpu_class
        total = node.gpus.get(cls, 0) if cls else max(node.gpus.values(), default=0)
        left = free.gpus.get(cls, 0) if cls else max(free.gpus.values(), default=0)
        if total < profile.gpu:
            return f"needs {profile.gpu} GPU(s) of class {cls or 'any'}; node {node.id} has {total}"
        if left < profile.gpu:
            return (
                f"needs {profile.gpu} GPU(s) of class {cls or 'any'}; node {node.id} has "
                f"{max(left, 0)} of {total} free"
            )
    if profile.cpu_cores > node.cores:
        return f"needs {profile.cpu_cores} cores; node {node.id} has only {node.cores}"
    if profile.min_memory_gb > node.memory_gb:
        return f"needs {profile.min_memory_gb:g} GB memory; node {node.id} has only {node.memory_gb:g} GB"
    if profile.cpu_cores and profile.cpu_cores > free.cores:
        return (
            f"needs {profile.cpu_cores} cores; node {node.id} has {max(free.cores, 0)} of "
            f"{node.cores} free"
        )
    if profile.min_memory_gb > free.memory_gb:
        return (
            f"needs {profile.min_memory_gb:g} GB memory; node {node.id} has "
            f"{max(free.memory_gb, 0):g} of {node.memory_gb:g} GB free"
        )
    return None
