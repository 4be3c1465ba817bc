"""What this machine has to offer replicas."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

import psutil

from llmgw.core.types import Gpu, Node
from llmgw.node.gpus import GpuFinder, counts


def probe(node_id: str, address: str = "127.0.0.1", gpus: GpuFinder | None = None) -> Node:
    """Cores this process may use, total memory and the GPUs `gpus` finds (none without), as a
    Node."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    memory_gb = round(psutil.virtual_memory().total / 2**30, 2)
    return with_gpus(Node(
        id=node_id,
        address=address,
        labels={"hostname": socket.gethostname()},
        cores=cores,
        memory_gb=memory_gb,
    ), list(gpus.look().gpus) if gpus is not None else [])


def with_gpus(node: Node, devices: Sequence[Gpu]) -> Node:
    """`node` offering `devices`: its GPUs one by one, and counted by class."""
    return node.model_copy(update={"devices": list(devices), "gpus": counts(devices)})


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the engine binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
