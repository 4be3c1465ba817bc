"""A replica's GPUs named in few characters."""

from __future__ import annotations

from llmgw.core.devices import named
from tests.factories import a100_pair_node, h200_node


def test_gpus_are_named_by_class_and_index_else_by_the_start_of_their_uuid() -> None:
    [h200] = h200_node().devices
    pair = a100_pair_node(gpu_class="a100").devices

    assert named([h200.uuid], [h200]) == "h200:0"
    assert named([g.uuid for g in pair], pair) == "a100:0,1"
    assert named(["l4-0"], []) == "l4-0"  # declared: its name is all there is
    assert named(["GPU-5f3c0a1e-7d2b-4c9a"], []) == "GPU-5f3c0a1e"
    assert named([], []) == ""
