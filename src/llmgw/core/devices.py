"""A replica's GPUs named in few characters, the same in `ctl` and the console."""

from __future__ import annotations

from collections.abc import Sequence

from llmgw.core.types import Gpu


def named(uuids: Sequence[str], known: Sequence[Gpu]) -> str:
    """By class and index where the node reported them (`h200:0`, `a100:0,1`), else by the start
    of the UUID (a declared GPU's whole name, `l4-0`); empty for a CPU replica."""
    by_uuid = {g.uuid: g for g in known}
    classes: dict[str, list[str]] = {}
    for u in uuids:
        g = by_uuid.get(u)
        if g is None:
            classes.setdefault(u[:12], [])
        else:
            classes.setdefault(g.gpu_class, []).append(str(g.index))
    return " ".join(f"{c}:{','.join(i)}" if i else c for c, i in classes.items())
