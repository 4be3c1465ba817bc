"""The engine probe: start llama-server on a model once (on a GPU when given one), ask it for a
few tokens, and learn what this host needs to run it (`--no-repack` when the build's kernels die
of SIGILL here); and the GPU devices a llama-server build can use (`--list-devices`)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import aiohttp

from llmgw.engines import crashes
from llmgw.engines.crashes import NO_REPACK, Exit
from llmgw.node.engine_compat import EngineCompat
from llmgw.node.hardware import free_port
from llmgw.node.process import spawn, tail, terminate
from llmgw.node.supervisor import wait_healthy

# A probe generates this many tokens: enough to run the matrix kernels a real answer runs
# (a start alone may only load the weights), few enough to take a second on a small model.
PROBE_TOKENS = 8
# Every layer on the GPU (llama.cpp caps the count at the model's layers).
ALL_LAYERS = ("--n-gpu-layers", "999")
# A line of `llama-server --list-devices`: `  CUDA0: NVIDIA H200 (143156 MiB, 142523 MiB free)`.
_DEVICE = re.compile(r"^\s+(?P<id>[A-Za-z][\w-]*?\d*):\s*(?P<name>.*?)"
                     r"(?:\s*\((?P<total>\d+) MiB,\s*(?P<free>\d+) MiB free\))?\s*$")


@dataclass(frozen=True)
class EngineDevice:
    """A device a llama-server build can offload to, as `--list-devices` prints it."""

    id: str  # `CUDA0`, `Vulkan0`
    name: str
    memory_mib: int | None = None
    free_mib: int | None = None

    @property
    def backend(self) -> str:
        """The build's backend for it: `CUDA`, `Vulkan`, `ROCm`, `Metal`."""
        return self.id.rstrip("0123456789")


def parse_devices(text: str) -> list[EngineDevice]:
    """The devices in `llama-server --list-devices`' output (a CPU-only build lists none)."""
    out: list[EngineDevice] = []
    listing = False
    for line in text.splitlines():
        if line.strip() == "Available devices:":
            listing = True
            continue
        found = _DEVICE.match(line) if listing else None
        if found is None:
            continue
        total, free = found["total"], found["free"]
        out.append(EngineDevice(found["id"], found["name"], int(total) if total else None,
                                int(free) if free else None))
    return out


def list_devices(binary: str, timeout_s: float = 30.0) -> list[EngineDevice] | str:
    """The devices `binary` can use, or why it could not say (a build without the option)."""
    try:
        done = subprocess.run([binary, "--list-devices"], capture_output=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{binary} --list-devices did not run: {exc}"
    text = (done.stdout + done.stderr).decode("utf-8", "replace")
    if done.returncode != 0 or "Available devices:" not in text:
        return f"{binary} --list-devices exited with code {done.returncode}: is it llama-server?"
    return parse_devices(text)


@dataclass(frozen=True)
class Probe:
    """One start of the engine: did it answer, with which extra args, and what happened."""

    ok: bool
    args: tuple[str, ...]
    detail: str
    ended: Exit | None = None


async def probe_once(binary: str, model: Path, log_path: Path, args: list[str],
                     timeout_s: float = 120.0, gpu: str | None = None) -> Probe:
    """Start `binary` on `model` with `args` (every layer on GPU `gpu`, by UUID, when given),
    wait for /health, generate a few tokens, stop it."""
    port = free_port("127.0.0.1")
    argv = [binary, "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--ctx-size", "512", "--threads", str(max(1, min(os.cpu_count() or 1, 4))),
            "--no-webui", *(ALL_LAYERS if gpu else ()), *args]
    try:
        proc = await spawn(argv, log_path, {"CUDA_VISIBLE_DEVICES": gpu} if gpu else None)
    except OSError as exc:
        return Probe(False, tuple(args), f"cannot start {binary}: {exc}")
    try:
        base = f"http://127.0.0.1:{port}"
        try:
            code = await wait_healthy(proc, base + "/health", timeout_s, time.monotonic)
        except TimeoutError:
            return Probe(False, tuple(args), f"llama-server did not become healthy within "
                                             f"{timeout_s:g}s (log: {log_path})")
        if code is None:
            try:
                rate = await _generate(base, timeout_s)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                if proc.returncode is None:
                    await asyncio.wait({asyncio.ensure_future(proc.wait())}, timeout=2)
                if proc.returncode is None:
                    return Probe(False, tuple(args), f"llama-server did not answer: {exc!r}")
                code = proc.returncode
            else:
                speed = f" at {rate:.1f} tokens/s" if rate else ""
                return Probe(True, tuple(args), f"answered a chat request{speed}")
        ended = Exit(code)
        return Probe(False, tuple(args),
                     crashes.message("llama-server", ended, str(log_path), tail(log_path)), ended)
    finally:
        await terminate(proc, 5.0)


async def _generate(base: str, timeout_s: float) -> float:
    """Generate PROBE_TOKENS tokens; the engine's own generation rate (tokens/s)."""
    body = {"messages": [{"role": "user", "content": "Name a colour."}],
            "max_tokens": PROBE_TOKENS, "temperature": 0}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        async with session.post(base + "/v1/chat/completions", json=body) as resp:
            if resp.status != 200:
                raise ValueError(f"HTTP {resp.status}")
            answer = await resp.json()
    # llama-server adds its own timings to the OpenAI shape; another engine may not.
    return float((answer.get("timings") or {}).get("predicted_per_second") or 0.0)


async def check_engine(binary: str, model: Path, log_dir: Path, compat: EngineCompat,
                       now: datetime, gpu: str | None = None) -> list[Probe]:
    """Probe `binary` as this host would run it (on GPU `gpu` when given); when that dies of
    SIGILL, probe again with `--no-repack` and, if that answers, remember it for every later
    start here."""
    args = compat.extra_args(binary)
    log = log_dir / "engine-probe.log"
    tries = [await probe_once(binary, model, log, args, gpu=gpu)]
    first = tries[0]
    if first.ended is not None and first.ended.illegal_instruction and NO_REPACK not in args:
        second = await probe_once(binary, model, log, [*args, NO_REPACK], gpu=gpu)
        tries.append(second)
        if second.ok:
            compat.learn(binary, [NO_REPACK], "the engine probe died with SIGILL and ran with "
                         f"{NO_REPACK}", now)
    return tries
