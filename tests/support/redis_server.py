"""A real Redis for tests: `redis-server` from Debian's package (`scripts/test.sh` installs it
when it is missing), on a free port of its own, in a temp dir, with no persistence: each test
that needs one starts its own, so a test may stop, pause (SIGSTOP) or kill it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REDIS_ENV = "LLMGW_REDIS_SERVER"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary() -> str:
    found = os.environ.get(REDIS_ENV) or shutil.which("redis-server")
    if not found:
        raise AssertionError("redis-server was not found: apt-get install redis-server, or set "
                             f"{REDIS_ENV} (scripts/test.sh installs it)")
    return found


@dataclass
class RedisServer:
    """One redis-server process; `url` is where it listens."""

    dir: Path
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None
    args: tuple[str, ...] = ()  # more redis-server options (`--requirepass`, say)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    # NOAUTH: up, and asking for the password it was started with.
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):
                        return
            except OSError:
                time.sleep(0.02)
        raise AssertionError(f"redis-server did not answer on port {self.port}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server, killed at the end of the test."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.resume() if server.proc and server.proc.poll() is None else None
        server.kill()
