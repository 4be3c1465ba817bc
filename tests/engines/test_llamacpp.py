"""llama.cpp's profile arguments as llmgw reads them: slots, and how many requests a replica
runs at once to good effect."""

from __future__ import annotations

from pathlib import Path

from llmgw.control.judge_keeper import judge_request
from llmgw.core.judges import KNOWN
from llmgw.engines import llamacpp
from llmgw.server.init import demo_judge
from tests.factories import cpu_profile, gpu_profile


def test_slots_are_the_profiles_parallel() -> None:
    assert llamacpp.slots(cpu_profile(args=["--parallel", "2"])) == 2
    assert llamacpp.slots(cpu_profile(args=["-np=4"])) == 4
    assert llamacpp.slots(cpu_profile()) is None
    assert llamacpp.slots(cpu_profile(args=["--parallel", "x"])) is None


def test_the_demo_judge_on_one_thread_runs_one_judgment_at_a_time() -> None:
    [profile] = demo_judge(Path("/models/demo.gguf")).profiles
    assert llamacpp.slots(profile) == 2
    assert llamacpp.lanes(profile) == 1


def test_replicas_with_threads_or_a_gpu_to_batch_on_run_all_their_slots() -> None:
    spec = KNOWN["qwen3guard-0.6b"]
    [cpu] = judge_request(spec, [8]).profiles  # two threads each
    [gpu] = judge_request(spec, [8], gpu_class="l4").profiles
    assert llamacpp.lanes(cpu) is None
    assert llamacpp.lanes(gpu) is None
    assert llamacpp.lanes(cpu_profile(cores=1, args=["--parallel", "2", "-ngl", "99"])) is None
    assert llamacpp.lanes(gpu_profile(args=["--parallel", "2"])) is None


def test_one_thread_is_one_lane_however_it_is_said() -> None:
    assert llamacpp.lanes(cpu_profile(cores=4, args=["--parallel", "2", "--threads", "1"])) == 1
    assert llamacpp.lanes(cpu_profile(cores=1, args=["--parallel", "2", "-t", "2"])) is None
    assert llamacpp.lanes(cpu_profile(cores=1, args=["--parallel", "2", "-ngl", "0"])) == 1
    assert llamacpp.lanes(cpu_profile(cores=1, args=["--parallel", "1"])) is None  # one slot
