"""llama.cpp's profile arguments as llmgw reads them: slots, and how many requests a replica
runs at once to good effect."""

from __future__ import annotations

from pathlib import Path

from llmgw.control.judge_keeper import judge_request
from llmgw.core.judges import KNOWN
from llmgw.core.types import Gpu, Profile
from llmgw.engines import llamacpp
from llmgw.server.init import demo_judge
from tests.factories import cpu_profile, gpu_device, gpu_profile


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


# --- on GPUs ---------------------------------------------------------------------------------


def launched(profile: Profile, devices: list[Gpu] | None = None) -> list[str]:
    return llamacpp.argv("llama-server", "/m.gguf", profile, "127.0.0.1", 9000, "m", None,
                         devices or [])


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_a_replica_on_one_gpu_offloads_every_layer_with_a_few_threads() -> None:
    argv = launched(gpu_profile(cpu_cores=16), [gpu_device(0, "h200", 139.8)])

    assert flag(argv, "--n-gpu-layers") == llamacpp.ALL_LAYERS
    assert flag(argv, "--threads") == str(llamacpp.GPU_THREADS)
    assert "--split-mode" not in argv and "--tensor-split" not in argv


def test_partial_offload_keeps_a_thread_per_core_for_the_layers_left_on_the_cpu() -> None:
    argv = launched(gpu_profile(cpu_cores=16, gpu_layers=20), [gpu_device(0, "l4", 24.0)])

    assert (flag(argv, "--n-gpu-layers"), flag(argv, "--threads")) == ("20", "16")


def test_a_replica_on_two_gpus_splits_its_layers_by_their_memory() -> None:
    pair = [gpu_device(0, "a100", 40.0), gpu_device(1, "a100", 80.0)]
    argv = launched(gpu_profile(gpu=2, gpu_class="a100"), pair)

    assert (flag(argv, "--split-mode"), flag(argv, "--tensor-split")) == ("layer", "40,80")
    # Declared devices (memory unknown): llama.cpp splits by what it finds free.
    declared = launched(gpu_profile(gpu=2), [])
    assert flag(declared, "--split-mode") == "layer" and "--tensor-split" not in declared


def test_what_the_profile_says_of_gpus_wins() -> None:
    mine = ["-ngl", "12", "-sm", "row", "-ts", "1,3", "-t", "8"]
    pair = [gpu_device(0, "a100", 40.0), gpu_device(1, "a100", 80.0)]
    argv = launched(gpu_profile(gpu=2, gpu_class="a100", args=mine), pair)

    assert argv[3:11] == mine
    for added in ("--n-gpu-layers", "--split-mode", "--tensor-split", "--threads"):
        assert added not in argv
    # Its own layer count is partial offload: the threads stay one per core.
    assert flag(launched(gpu_profile(cpu_cores=8, args=["-ngl", "10"])), "--threads") == "8"


def test_a_cpu_replica_offloads_nothing() -> None:
    argv = launched(cpu_profile(cores=2))

    assert "--n-gpu-layers" not in argv and flag(argv, "--threads") == "2"


def test_a_gpu_replica_sees_its_own_devices_and_a_cpu_replica_none() -> None:
    uuids = ["GPU-5f3c0a1e-aaaa", "MIG-5f3c0a1e-bbbb"]

    assert llamacpp.gpu_env(gpu_profile(gpu=2), uuids) == {"CUDA_VISIBLE_DEVICES": ",".join(uuids)}
    assert llamacpp.gpu_env(cpu_profile(), []) == {"CUDA_VISIBLE_DEVICES": ""}
    # Declared devices have no UUID CUDA knows: the replica sees what the machine shows.
    assert llamacpp.gpu_env(gpu_profile(), ["l4-0"]) == {}
