"""Running the real `llmgw` CLI as a subprocess for end-to-end tests."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.isolation import clean_env

LLMGW = [sys.executable, "-m", "llmgw.cli"]
KEY_RE = re.compile(r"sk-llmgw-[A-Za-z0-9_-]+")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.2) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # the thing polled may not be up yet
            last = exc
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last error: {last!r})")


def run_cli(*args: str, env: Mapping[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """`llmgw ARGS` in the suite's clean environment (tests/support/isolation.py) with `env` on top."""
    proc = subprocess.run(
        [*LLMGW, *args], env={**clean_env(), **(env or {})}, capture_output=True, text=True,
        timeout=300,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"llmgw {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@dataclass
class LlmgwServer:
    """An initialised data dir and, once started, a running `llmgw server run`."""

    data_dir: Path
    port: int
    admin_key: str
    env: dict[str, str]
    proc: subprocess.Popen[str] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.data_dir / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def init(cls, data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> LlmgwServer:
        port = free_port()
        # COLUMNS: wide tables, so a test reads whole cells rather than folded ones. Never the
        # caller's install: the clean environment, the test's own values, and its data dir last.
        env = {**clean_env(), "COLUMNS": "250", **(env or {}), "LLMGW_DATA_DIR": str(data_dir)}
        out = run_cli("server", "init", "--port", str(port), *extra, env=env).stdout
        # The full key is the longest match; lists show only its prefix.
        key = max(KEY_RE.findall(out), key=len, default="")
        assert len(key) > 40, f"init printed no admin key:\n{out}"
        ctl_env = {**env, "LLMGW_URL": f"http://127.0.0.1:{port}", "LLMGW_ADMIN_KEY": key,
                   "LLMGW_CTL_CONFIG": str(data_dir / "ctl.toml")}
        return cls(data_dir, port, key, ctl_env)

    def allow(self, setting: str, programs: list[str]) -> None:
        """Let the server's own node run `programs` (`engine_commands` or `mcp_commands`, which
        `server init` writes empty)."""
        config = self.data_dir / "config.toml"
        text, empty = config.read_text(), f"\n{setting} = []\n"
        assert empty in text  # what init writes: none allowed
        config.write_text(text.replace(empty, f"\n{setting} = {json.dumps(programs)}\n"))

    def start(self, *args: str) -> None:
        """`server run` with `args` (such as `--workers 1`) added."""
        log = open(self.log_path, "a")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [*LLMGW, "server", "run", "--log-level", "info", *args],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )
        wait_for("the server's /health", lambda: self.get("/health", auth=False) == {"status": "ok"}, 30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)

    @contextlib.contextmanager
    def running(self, *args: str) -> Iterator[LlmgwServer]:
        """`start` (with `args`), and `stop` when the block ends; when the block fails, the tail
        of the server's log is printed, for pytest to show with the failure."""
        try:
            self.start(*args)
            yield self
        except BaseException:
            print(self.log()[-5000:])  # noqa: T201 - the server's side of a failure
            raise
        finally:
            self.stop()

    def get(self, path: str, auth: bool = True) -> Any:
        return self.call("GET", path, auth=auth)

    def call(self, method: str, path: str, body: Any = None, auth: bool = True,
             key: str | None = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {key or self.admin_key}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())

    def replicas(self, model: str | None = None) -> list[dict[str, Any]]:
        suffix = f"?model={model}" if model else ""
        return list(self.get("/admin/v1/replicas" + suffix)["data"])

    def wait_ready(self, model: str, timeout_s: float = 180) -> dict[str, Any]:
        """The first ready replica of `model`, once there is one."""
        def ready() -> dict[str, Any] | None:
            return next((r for r in self.replicas(model) if r["state"] == "ready"), None)

        return dict(wait_for(f"a ready replica of {model}", ready, timeout_s, every_s=0.5))

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_cli("ctl", *args, env=self.env, check=check)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """Terminate `proc`'s process group and reap it (killed if it has not gone in 5 s), then
    close the pipes the test held to it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        except ProcessLookupError:
            proc.wait(5)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()
