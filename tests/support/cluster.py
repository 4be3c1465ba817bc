"""An HA install on one machine for end-to-end tests: several `llmgw server run` processes on
one PostgreSQL database and several `llmgw node run` agents, all real processes.

Timings are short (lease TTL 3 s, node timeout 3 s, keepers every 0.5 s) so failures show and
heal within seconds. Nodes listen on distinct loopback addresses (127.0.0.11, .12, …) so a
replica's endpoint says which node runs it. Engines are the fake engine (tests/fakes) through a
wrapper script unless the cluster is asked for the real llama-server.

Use it as a context manager: every process it started is stopped (SIGCONT first, for paused
ones) when the block ends, and an AssertionError raised inside the block gets the tail of every
server's and node's log appended, so a failure explains itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

from llmgw.core.settings import ControlSettings, ServerSettings, dump, load
from tests.support.isolation import clean_env
from tests.support.server_process import LLMGW, LlmgwServer, free_port, pid_alive, wait_for

FAKE_ENGINE = Path(__file__).resolve().parents[1] / "fakes" / "fake_engine.py"

# Short, valid timings (ttl > renew deadline > 1.2 × retry).
TIMINGS: dict[str, Any] = {
    "leader_ttl_s": 3.0,
    "leader_renew_deadline_s": 2.0,
    "leader_retry_s": 0.5,
    "node_timeout_s": 3.0,
    "keeper_interval_s": 0.5,
    "refresh_interval_s": 0.2,
}
NODE_INTERVAL_S = 0.5
LOG_TAIL_LINES = 40


class Process:
    """What the harness does to any process it started: look, kill -9, stop."""

    proc: subprocess.Popen[str] | None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


class Server(Process, LlmgwServer):
    """One `llmgw server run` of the cluster, logging as text, that can be killed and paused."""

    name: str = ""
    paused: bool = False

    def launch(self) -> None:
        """Start the process without waiting for it (several servers start side by side)."""
        log = open(self.log_path, "a")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [*LLMGW, "server", "run", "--log-level", "info", "--log-format", "text"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )
        log.close()  # the child holds its own copy

    def wait_up(self, timeout_s: float = 60) -> None:
        def up() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"server {self.name} exited with {self.proc.returncode}")
            return bool(self.get("/health", auth=False) == {"status": "ok"})

        wait_for(f"server {self.name}'s /health", up, timeout_s)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.paused and self.running:
            self.resume()
        _terminate(self.proc)

    def cluster(self, timeout_s: float = 5) -> dict[str, Any]:
        """`GET /admin/v1/cluster` on this server."""
        return dict(self.call_with_timeout("GET", "/admin/v1/cluster", timeout_s=timeout_s))

    def call_with_timeout(self, method: str, path: str, body: Any = None,
                          timeout_s: float = 5) -> Any:
        import urllib.request

        headers = {"Content-Type": "application/json",
                   "Authorization": f"Bearer {self.admin_key}"}
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return json.loads(resp.read())


@dataclass
class Node(Process):
    """One `llmgw node run` agent with declared hardware."""

    node_id: str
    address: str
    cores: int
    memory_gb: float
    labels: dict[str, str]
    data_dir: Path
    # Its join token, bound to this node (a token reports as one node only).
    token: str = ""
    proc: subprocess.Popen[str] | None = None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "agent.log"

    def start(self, servers: Sequence[str], env: dict[str, str]) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            *LLMGW, "node", "run", "--server", ",".join(servers),
            "--node-id", self.node_id, "--address", self.address, "--cores", str(self.cores),
            "--memory-gb", str(self.memory_gb), "--data-dir", str(self.data_dir),
            "--interval", str(NODE_INTERVAL_S), "--log-format", "text",
        ]
        for k, v in self.labels.items():
            argv += ["--label", f"{k}={v}"]
        log = open(self.log_path, "a")  # noqa: SIM115 - handed to the child
        env = {**env, "LLMGW_NODE_TOKEN": self.token}  # as `ctl node token create` advises
        self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        log.close()

    def stop(self) -> None:
        _terminate(self.proc)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _terminate(proc: subprocess.Popen[str] | None) -> None:
    """SIGTERM (a clean stop takes the engines along), SIGKILL if it lingers past 30 s."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def engine_wrapper(directory: Path) -> Path:
    """A `llama-server` stand-in: a script that execs the fake engine with this Python."""
    path = directory / "fake-llama-server"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_ENGINE} \"$@\"\n")
    path.chmod(0o755)
    return path


def real_engine_wrapper(directory: Path, delay_s: float = 0.0) -> Path:
    """The real llama-server behind a script: a profile whose args hold `--mode` gets the fake
    engine instead (fault injection beside real models on one node), and `delay_s` makes every
    real start that much slower (a slow disk: a window in which a model is loading)."""
    from llmgw.engines.llamacpp import find_binary

    real = find_binary()  # $LLMGW_LLAMA_SERVER, PATH, or the packaged build
    path = directory / "llama-server-wrapper"
    path.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" --mode "*) exec {sys.executable} {FAKE_ENGINE} "$@";; esac\n'
        + (f"sleep {delay_s}\n" if delay_s > 0 else "")
        + f'exec {real} "$@"\n'
    )
    path.chmod(0o755)
    return path


def metrics_text(server: LlmgwServer) -> str:
    """`GET /metrics` on `server` (with its admin key), as Prometheus text."""
    import urllib.request

    req = urllib.request.Request(server.url + "/metrics",
                                 headers={"Authorization": f"Bearer {server.admin_key}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return str(resp.read().decode())


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` in Prometheus `text` whose labels include `labels`
    (0 when there are none)."""
    import re

    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:{{(.*?)}})? (\S+)$", text, flags=re.M):
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m[1] or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m[2])
    return total


@dataclass
class Cluster:
    """N servers on one database and M node agents, with helpers to break and watch them."""

    root: Path
    database: str
    servers: list[Server] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)
    node_env: dict[str, str] = field(default_factory=dict)
    _next_address: int = 11

    # --- building ----------------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def up(
        cls,
        root: Path,
        database: str,
        servers: int = 2,
        init_args: Sequence[str] = ("--no-guard",),
        real_engine: bool = False,
        settings: dict[str, Any] | None = None,
        engine: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> Iterator[Cluster]:
        """Init the install, start `servers` servers and a join token; stop everything after.

        Engines are the fake one unless `real_engine` (llama-server as the environment finds
        it) or `engine` (this executable) is given. `settings` may hold `[server]` and
        `[control]` keys alike. `extra_env` adds the test's own variables (such as HF_ENDPOINT) for
        servers and node agents, on top of the suite's clean environment."""
        cluster = cls(root, database)
        env = {**clean_env(), **(extra_env or {})}
        if engine is not None:
            env["LLMGW_LLAMA_SERVER"] = str(engine)
        elif not real_engine:
            env["LLMGW_LLAMA_SERVER"] = str(engine_wrapper(root))
        cluster.node_env = env
        try:
            with cluster.explained():
                cluster._init(servers, list(init_args), {**TIMINGS, **(settings or {})})
                yield cluster
        finally:
            cluster.close()

    def _init(self, count: int, init_args: list[str], settings: dict[str, Any]) -> None:
        first_dir = self.root / "server-1"
        first = Server.init(first_dir, "--database", self.database, "--no-embedded-node",
                            *init_args, env=self.node_env)
        # Tests keep their model files in the cluster's root, beside the data dirs.
        self._configure(first_dir, first.port, {"model_roots": [str(self.root)], **settings})
        first.name = "server-1"
        self.servers.append(first)
        for i in range(2, count + 1):
            data = self.root / f"server-{i}"
            data.mkdir(mode=0o700)
            port = free_port()
            cfg = data / "config.toml"
            cfg.write_text((first_dir / "config.toml").read_text())
            cfg.chmod(0o600)
            self._configure(data, port, {})
            env = {**first.env, "LLMGW_DATA_DIR": str(data), "LLMGW_URL": f"http://127.0.0.1:{port}",
                   "LLMGW_CTL_CONFIG": str(data / "ctl.toml")}
            server = Server(data, port, first.admin_key, env)
            server.name = f"server-{i}"
            self.servers.append(server)
        for server in self.servers:
            server.launch()
        for server in self.servers:
            server.wait_up()

    @staticmethod
    def _configure(data_dir: Path, port: int, updates: dict[str, Any]) -> None:
        """Rewrite a config.toml with `updates` (and `port`), through the settings model; a
        `[control]` setting may be given by its name alone."""
        path = data_dir / "config.toml"
        data = {**load(data_dir).model_dump(), "port": port}
        for name, value in updates.items():
            if name in ControlSettings.model_fields:
                data["control"] = {**data["control"], name: value}
            else:
                data[name] = value
        path.write_text(dump(ServerSettings.model_validate(data)))

    def add_node(self, node_id: str, cores: int, memory_gb: float,
                 labels: dict[str, str] | None = None, start: bool = True) -> Node:
        node = Node(node_id, f"127.0.0.{self._next_address}", cores, memory_gb, labels or {},
                    self.root / "nodes" / node_id)
        self._next_address += 1
        out = self.any_server().ctl("--json", "node", "token", "create", "--name",
                                    f"e2e-{node_id}", "--node", node_id).stdout
        node.token = json.loads(out)["key"]
        self.nodes[node_id] = node
        if start:
            node.start([s.url for s in self.servers], self.node_env)
        return node

    def wait_nodes_ready(self, *node_ids: str, timeout_s: float = 30) -> None:
        wanted = set(node_ids or self.nodes)

        def ready() -> bool:
            rows = self.any_server().get("/admin/v1/nodes")["data"]
            return wanted <= {n["id"] for n in rows if n.get("status") == "ready"}

        self.wait(f"nodes {sorted(wanted)} to report ready", ready, timeout_s)

    def close(self) -> None:
        """Stop every node (and so its engines) and every server; nothing is left running."""
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.stop()
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop()

    # --- looking -----------------------------------------------------------------------------

    def alive(self) -> list[Server]:
        return [s for s in self.servers if s.running and not s.paused]

    def any_server(self) -> Server:
        return self.alive()[0]

    def statuses(self, among: Sequence[Server] | None = None) -> dict[str, dict[str, Any]]:
        """Each live server's cluster status, by server name (unreachable ones left out)."""
        out: dict[str, dict[str, Any]] = {}
        for s in among if among is not None else self.alive():
            with contextlib.suppress(Exception):
                out[s.name] = s.cluster()
        return out

    def leader(self, among: Sequence[Server] | None = None) -> Server | None:
        """The one server that says it leads, or None (also when more than one says so)."""
        statuses = self.statuses(among)
        leading = [name for name, st in statuses.items() if st["leading"]]
        if len(leading) != 1:
            return None
        return next(s for s in self.servers if s.name == leading[0])

    def wait_leader(self, among: Sequence[Server] | None = None, timeout_s: float = 30) -> Server:
        found: Server = self.wait("exactly one leader", lambda: self.leader(among), timeout_s,
                                  every_s=0.1)
        return found

    def replicas(self, model: str | None = None, server: Server | None = None) -> list[dict[str, Any]]:
        return (server or self.any_server()).replicas(model)

    def live_replicas(self, model: str, server: Server | None = None) -> list[dict[str, Any]]:
        """Replicas of `model` that count towards its min (every state but stopping)."""
        return [r for r in self.replicas(model, server) if r["state"] != "stopping"]

    def wait_ready_replicas(self, model: str, count: int, timeout_s: float = 30,
                            server: Server | None = None,
                            not_on: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Wait until `model` has exactly `count` live replicas, all ready (and none on the
        nodes `not_on`)."""
        def settled() -> list[dict[str, Any]] | None:
            live = self.live_replicas(model, server)
            if (len(live) == count and all(r["state"] == "ready" for r in live)
                    and not any(r["node_id"] in not_on for r in live)):
                return live
            return None

        where = f" off {', '.join(not_on)}" if not_on else ""
        found: list[dict[str, Any]] = self.wait(f"{count} ready replicas of {model}{where}",
                                                settled, timeout_s)
        return found

    def wait_routed(self, model: str, key: str, timeout_s: float = 10) -> None:
        """Until every live server answers a chat for `model`: a replica ready in the store
        reaches each server's routing table only at its next refresh."""
        def answers(server: Server) -> bool:
            with openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0,
                               timeout=10) as client:
                client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
            return True

        for server in self.alive():
            self.wait(f"{server.name} to route {model}", lambda s=server: answers(s), timeout_s)

    def nodes_by_id(self) -> dict[str, dict[str, Any]]:
        return {n["id"]: n for n in self.any_server().get("/admin/v1/nodes")["data"]}

    def wait(self, what: str, check: Callable[[], Any], timeout_s: float,
             every_s: float = 0.2) -> Any:
        """`wait_for`, with the last state of the replicas in the message when it times out."""
        try:
            return wait_for(what, check, timeout_s, every_s)
        except AssertionError as exc:
            with contextlib.suppress(Exception):
                exc.args = (f"{exc.args[0]}\nreplicas now: {self._replica_summary()}",)
            raise

    def _replica_summary(self) -> str:
        rows = self.replicas()
        return "; ".join(f"{r['model']} {r['id']} on {r['node_id']} {r['state']} "
                         f"{r['endpoint']} {r.get('last_error') or ''}".strip() for r in rows)

    # --- failure reports ---------------------------------------------------------------------

    def logs(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last `lines` lines of every server's and node's log."""
        parts = []
        for s in self.servers:
            parts.append(_tail(f"server {s.name} ({s.url}, pid {s.pid if s.proc else '-'})",
                               s.log(), lines))
        for n in self.nodes.values():
            parts.append(_tail(f"node {n.node_id} ({n.address})", n.log(), lines))
        return "\n".join(parts)

    @contextlib.contextmanager
    def explained(self) -> Iterator[None]:
        """An assertion failing inside gets every process's log tail appended to its message."""
        try:
            yield
        except Exception as exc:
            what = "" if isinstance(exc, AssertionError) else f"{type(exc).__name__}: "
            raise AssertionError(f"{what}{exc}\n\n{self.logs()}") from exc


def _tail(title: str, text: str, lines: int) -> str:
    """The last `lines` log lines, tracebacks folded to their last line."""
    kept = [line for line in text.splitlines()
            if line.strip() and not line.startswith((" ", "\t", "Traceback", "The above",
                                                     "During handling"))]
    body = "\n".join(kept[-lines:])
    return f"----- {title} -----\n{body}"


def hold(what: str, check: Callable[[], bool], seconds: float, every_s: float = 0.2) -> None:
    """`check` stays true for `seconds` (polled): for properties that must last, not arrive."""
    deadline = time.monotonic() + seconds
    while True:
        assert check(), f"{what} stopped holding"
        if time.monotonic() >= deadline:
            return
        time.sleep(every_s)


class Background:
    """A function run in a thread until stopped; its exception, if any, is re-raised on join."""

    def __init__(self, target: Callable[[threading.Event], None]) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None

        def run() -> None:
            try:
                target(self.stop)
            except BaseException as exc:  # re-raised in join()
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self, timeout_s: float = 60) -> None:
        self.stop.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the background thread did not end"
        if self.error is not None:
            raise self.error


__all__ = ["Background", "Cluster", "Node", "Server", "engine_wrapper", "hold", "metric",
           "metrics_text", "pid_alive", "real_engine_wrapper"]
