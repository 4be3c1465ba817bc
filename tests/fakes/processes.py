"""Helpers for tests that watch real subprocesses: the fake engine's path, liveness, deadlines."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")


def fake_engine_argv(port: int, mode: str, *extra: str) -> list[str]:
    """The command line that runs the fake engine on `port` in `mode`."""
    return [
        sys.executable,
        str(FAKE_ENGINE),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--mode",
        mode,
        *extra,
    ]


def gone(pid: int) -> bool:
    """True when `pid` no longer runs (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    """Poll `check` until it holds; fail with `what` after `timeout_s`.

    Only for waiting on another process, where there is nothing to await.
    """
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.05)


def kill_quietly(pid: int) -> None:
    """Last-resort cleanup of a process a failed test left behind."""
    try:
        psutil.Process(pid).kill()
    except psutil.NoSuchProcess:
        pass
