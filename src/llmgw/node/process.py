"""Starting and stopping engine processes so that none outlives the server."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
# Loaded once here: between fork and exec (where die_with_parent runs) loading a library
# could deadlock on a lock another thread held at fork time.
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent() -> None:
    """For `preexec_fn`: the child gets SIGKILL when the thread that started it dies."""
    # Runs in the child between fork and exec: the kernel sends SIGKILL when the thread that
    # forked it dies, so a `kill -9` of the server takes its engines (and workers) along.
    # Forking happens on the event-loop thread, which lives as long as the server.
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


async def spawn(
    argv: list[str], log_path: Path, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """Start `argv` in its own process group with output appended to `log_path`; `env` adds to
    this process's environment (secrets go there, not in argv, which every user can read)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return await asyncio.create_subprocess_exec(
            *argv,
            env={**os.environ, **env} if env else None,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


async def terminate(proc: asyncio.subprocess.Process, grace_s: float) -> int:
    """SIGTERM the process group, SIGKILL it after `grace_s`, and reap; returns the exit code."""
    if proc.returncode is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except TimeoutError:
            logger.warning("engine pid %d ignored SIGTERM for %.0fs; killing it", proc.pid, grace_s)
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
    else:
        # The leader is gone; make sure nothing it started lingers in its group.
        _signal_group(proc.pid, signal.SIGKILL)
    return proc.returncode if proc.returncode is not None else -1


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def log_size(path: Path) -> int:
    """How long a log is now (0 when there is none yet): where the next start's lines begin."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def since(path: Path, offset: int, max_bytes: int = 65536) -> str:
    """A log's text from `offset` (one start's lines), at most `max_bytes` of it."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return ""


def tail(path: Path, max_bytes: int = 2000) -> str:
    """The last lines of an engine log, for error messages."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-5:])
