"""What this machine has to offer replicas."""

from __future__ import annotations

import os
import socket

import psutil

from llmgw.core.types import Node


def probe(node_id: str, address: str = "127.0.0.1") -> Node:
    """Cores this process may use and total memory, as a Node."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    memory_gb = round(psutil.virtual_memory().total / 2**30, 2)
    return Node(
        id=node_id,
        address=address,
        labels={"hostname": socket.gethostname()},
        cores=cores,
        memory_gb=memory_gb,
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the engine binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
