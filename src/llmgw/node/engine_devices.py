"""Which GPUs an engine binary can offload to: `llama-server --list-devices`, asked once per
binary (as it is on disk), so a replica placed on a GPU never starts on a build without a GPU
backend and serves from the CPU as if all were well."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from llmgw.engines.crashes import NO_CUDA
from llmgw.node.engine_compat import binary_key

logger = logging.getLogger(__name__)

# Listing starts the backends (CUDA's takes a few seconds on a big machine), then exits.
LIST_TIMEOUT_S = 60.0
# What `--list-devices` prints before its devices, one a line ("  CUDA0: NVIDIA H200 (…)").
_HEADER = "Available devices:"
_NVML_UUIDS = ("GPU-", "MIG-")

# Per binary (path, size, mtime): its devices, or None when it could not say (an older build
# without `--list-devices`): then only its log can tell (see `crashes.NO_GPU_LINE`).
_listed: dict[str, tuple[str, ...] | None] = {}


def parse(output: str) -> tuple[str, ...]:
    """The devices `--list-devices` printed, one line each (`CUDA0: NVIDIA H200 (…)`)."""
    lines = output.splitlines()
    if _HEADER not in (line.strip() for line in lines):
        return ()
    start = next(i for i, line in enumerate(lines) if line.strip() == _HEADER) + 1
    found = []
    for line in lines[start:]:
        text = line.strip()
        if not line.startswith((" ", "\t")) or not text:
            break
        if text != "(none)":
            found.append(text)
    return tuple(found)


async def listed(binary: str) -> tuple[str, ...] | None:
    """The devices `binary` can offload to, asked once per binary; None when it cannot say."""
    key = binary_key(binary, "")
    if key not in _listed:
        _listed[key] = await _list(binary)
    return _listed[key]


async def cannot_offload(binary: str, devices: Sequence[str]) -> str | None:
    """Why `binary` cannot run a replica on `devices` (NVML UUIDs, or declared names), or None:
    a GPU found by NVML needs a CUDA device, a declared one any GPU device."""
    found = await listed(binary)
    if found is None:
        return None
    cuda = any(d.startswith(_NVML_UUIDS) for d in devices)
    usable = [d for d in found if d.startswith("CUDA")] if cuda else list(found)
    return None if usable else NO_CUDA


async def _list(binary: str) -> tuple[str, ...] | None:
    try:
        proc = await asyncio.create_subprocess_exec(
            binary, "--list-devices", stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    except OSError as exc:
        logger.warning("cannot list %s's devices: %s", binary, exc)
        return None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), LIST_TIMEOUT_S)
    except TimeoutError:
        logger.warning("%s --list-devices did not answer within %gs", binary, LIST_TIMEOUT_S)
        return None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode(errors="replace")
    if proc.returncode != 0 or _HEADER not in text:
        logger.info("%s cannot list its devices (exit %s); its log will tell", binary,
                    proc.returncode)
        return None
    return parse(text)
