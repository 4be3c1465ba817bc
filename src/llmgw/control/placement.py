"""Whether a profile fits on a node, given what is already placed there (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.core.types import Node, Profile, Replica, ReplicaState


@dataclass(frozen=True)
class Free:
    """What a node has left for new replicas."""

    cores: int
    memory_gb: float


def free_on(node: Node, replicas: list[Replica]) -> Free:
    """A node's capacity minus what its non-stopping replicas hold."""
    held = [r for r in replicas if r.node_id == node.id and r.state != ReplicaState.STOPPING]
    return Free(
        cores=node.cores - sum(r.cpu_cores for r in held),
        memory_gb=round(node.memory_gb - sum(r.memory_gb for r in held), 3),
    )


def misfit(profile: Profile, node: Node, free: Free) -> str | None:
    """None when `profile` fits on `node` with `free` left; otherwise why it does not."""
    if node.cordoned:
        return f"node {node.id} is cordoned"
    for key, want in profile.node_selector.items():
        if node.labels.get(key) != want:
            return f"node {node.id} lacks label {key}={want}"
    if profile.gpu:
        cls = profile.gpu_class
        have = node.gpus.get(cls, 0) if cls else sum(node.gpus.values())
        if have < profile.gpu:
            return f"needs {profile.gpu} GPU(s) of class {cls or 'any'}; node {node.id} has {have}"
    if profile.cpu_cores > node.cores:
        return f"needs {profile.cpu_cores} cores; node {node.id} has only {node.cores}"
    if profile.min_memory_gb > node.memory_gb:
        return f"needs {profile.min_memory_gb:g} GB memory; node {node.id} has only {node.memory_gb:g} GB"
    if profile.cpu_cores > free.cores:
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
