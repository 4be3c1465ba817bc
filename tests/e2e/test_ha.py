"""HA end to end: several real servers on a real PostgreSQL, real node agents, broken on purpose.

Engines are the fake engine (fast to start, says which port answered) except in the last test,
which runs the real llama-server on the demo model. Timings are the harness's short ones
(tests/support/cluster.py): lease TTL 3 s, renew deadline 2 s, retry 0.5 s, node timeout 3 s.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import tempfile
import threading
import time
import urllib.error
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import DEMO
from tests.support.cluster import TIMINGS, Background, Cluster, Server, hold
from tests.support.pg import PostgresCluster, fresh_database, start_cluster
from tests.support.server_process import pid_alive, wait_for

MODEL = "tiny"
TTL_S = float(TIMINGS["leader_ttl_s"])
# Failover may take the TTL, one retry of the follower and a poll; on a busy 2-core machine
# a little scheduling slack on top.
FAILOVER_MARGIN_S = 2.0


def figure(line: str) -> None:
    """A measured figure, on stdout (`pytest -s` or `-rP` shows it)."""
    print(f"[ha] {line}")  # noqa: T201 - the measurement is the point


def model_file(root: Path) -> Path:
    """Any file serves as the model for the fake engine (it ignores --model)."""
    path = root / "tiny.gguf"
    path.write_bytes(b"GGUF fake weights")
    return path


def add_model(cluster: Cluster, root: Path, min_: int, memory_gb: float = 1.0,
              server: Server | None = None) -> None:
    (server or cluster.any_server()).ctl(
        "model", "add", MODEL, "--path", str(model_file(root)), "--cores", "1",
        "--memory-gb", str(memory_gb), "--min", str(min_), "--max", "8",
    )


def assert_no_duplicates(replicas: list[dict[str, Any]]) -> None:
    ids = [r["id"] for r in replicas]
    endpoints = [r["endpoint"] for r in replicas if r["endpoint"]]
    assert len(set(ids)) == len(ids), f"duplicate replica ids: {ids}"
    assert len(set(endpoints)) == len(endpoints), f"two replicas share an endpoint: {endpoints}"


@pytest.mark.timeout(180)
def test_kill_9_the_leader_fails_over_within_the_ttl(tmp_path: Path, postgres_url: str) -> None:
    with Cluster.up(tmp_path, fresh_database(postgres_url), servers=2) as c:
        c.add_node("node-a", cores=4, memory_gb=8)
        c.add_node("node-b", cores=2, memory_gb=4)
        c.add_node("node-c", cores=1, memory_gb=2, labels={"role": "judge"})
        c.wait_nodes_ready()
        add_model(c, tmp_path, min_=2)
        c.wait_ready_replicas(MODEL, 2)
        old = c.wait_leader()
        old_epoch = old.cluster()["epoch"]
        survivor = next(s for s in c.servers if s is not old)

        killed_at, killed_wall = time.monotonic(), datetime.now(UTC)
        old.kill9()
        status = c.wait(f"{survivor.name} to lead", lambda: (st := survivor.cluster())["leading"]
                        and st, TTL_S + 10, every_s=0.05)
        failover_s = time.monotonic() - killed_at

        def keeper_pass() -> bool:
            at = survivor.cluster()["last_reconcile_at"]
            return at is not None and datetime.fromisoformat(at) > killed_wall

        c.wait(f"{survivor.name}'s replica keeper to make a pass", keeper_pass, 10, every_s=0.05)
        first_pass_s = time.monotonic() - killed_at
        figure(f"failover (kill -9 of the leader -> new leader leading): {failover_s:.2f}s, "
               f"its first keeper pass {first_pass_s:.2f}s (lease TTL {TTL_S:.0f}s)")
        assert failover_s <= TTL_S + FAILOVER_MARGIN_S, f"failover took {failover_s:.2f}s"
        assert status["epoch"] > old_epoch
        assert status["lease"]["holder"] == status["server"]

        # The keepers run on the new leader: a scale made through it is placed and ready.
        survivor.ctl("--url", survivor.url, "model", "scale", MODEL, "--min", "3", "--max", "8")
        replicas = c.wait_ready_replicas(MODEL, 3, server=survivor)
        assert_no_duplicates(replicas)

        def exactly_three() -> bool:
            live = c.live_replicas(MODEL, survivor)
            assert_no_duplicates(live)
            return len(live) == 3

        hold("exactly 3 live replicas, none duplicated", exactly_three, 2 * TTL_S / 3)


def send_raw(server: Server, method: str, path: str, body: Any) -> http.client.HTTPConnection:
    """Send a request and return the connection without reading the answer: to a paused
    server the request waits in its socket until it runs again."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request(method, path, json.dumps(body),
                 {"Authorization": f"Bearer {server.admin_key}", "Content-Type": "application/json"})
    return conn


@pytest.mark.timeout(180)
def test_a_leader_paused_past_its_ttl_writes_nothing_when_it_wakes(
    tmp_path: Path, postgres_url: str,
) -> None:
    with Cluster.up(tmp_path, fresh_database(postgres_url), servers=2) as c:
        c.add_node("node-a", cores=4, memory_gb=8)
        c.add_node("node-b", cores=2, memory_gb=4)
        c.wait_nodes_ready()
        add_model(c, tmp_path, min_=2)
        c.wait_ready_replicas(MODEL, 2)
        paused = c.wait_leader()
        paused_epoch = paused.cluster()["epoch"]
        other = next(s for s in c.servers if s is not paused)

        paused.pause()
        status = c.wait(f"{other.name} to take over", lambda: (st := other.cluster())["leading"]
                        and st, TTL_S + 10, every_s=0.1)
        assert status["epoch"] > paused_epoch

        # While it sleeps, the new leader's keeper acts on a scale made through it.
        other.ctl("--url", other.url, "model", "scale", MODEL, "--min", "3", "--max", "8")
        c.wait_ready_replicas(MODEL, 3, server=other)

        # A scale sent to the sleeping server waits in its socket: the first thing it does on
        # waking is to commit it and wake its keeper, which then wants to place a replica while
        # the server still believes it leads at the old epoch.
        conn = send_raw(paused, "POST", f"/admin/v1/models/{MODEL}/scale", {"min": 4, "max": 8})
        paused.resume()
        answer = conn.getresponse()
        assert answer.status == 200, answer.read()
        conn.close()

        # It no longer acts as leader, and says why in its log.
        c.wait(f"{paused.name} to say it does not lead", lambda: not paused.cluster()["leading"],
               5, every_s=0.1)

        def said_so() -> str:
            log = paused.log()
            return " and ".join(what for what, line in (
                ("its keeper's stale write was refused", "leader-only write refused"),
                ("it stepped down", "stepping down as leader"),
            ) if line in log)

        how = c.wait(f"{paused.name}'s log to show it stepped down or was refused", said_so, 5)
        figure(f"paused leader woke at a stale epoch: {how}")
        after = other.cluster()
        assert after["leading"] and after["epoch"] == status["epoch"]
        assert after["lease"]["holder"] == status["server"]

        # Nothing was written twice: the new leader places the 4th replica, and only it.
        c.wait_ready_replicas(MODEL, 4, server=other)

        def exactly_four() -> bool:
            live = c.live_replicas(MODEL, other)
            assert_no_duplicates(live)
            return len(live) == 4

        hold("exactly 4 live replicas, none duplicated", exactly_four, 2.0)
        assert not paused.cluster()["leading"]


@pytest.mark.timeout(180)
def test_a_killed_node_is_lost_and_its_replicas_move_where_they_fit(
    tmp_path: Path, postgres_url: str,
) -> None:
    with Cluster.up(tmp_path, fresh_database(postgres_url), servers=2) as c:
        c.add_node("node-a", cores=4, memory_gb=8)
        c.add_node("node-b", cores=2, memory_gb=4)
        c.add_node("node-small", cores=2, memory_gb=0.5)  # too little memory for the model
        c.wait_nodes_ready()
        seen_on: set[str] = set()

        def watch(stop: threading.Event) -> None:
            while not stop.is_set():
                with contextlib.suppress(Exception):
                    seen_on.update(r["node_id"] for r in c.replicas(MODEL) if r["node_id"])
                stop.wait(0.1)

        watcher = Background(watch)
        add_model(c, tmp_path, min_=2, memory_gb=1)
        before = c.wait_ready_replicas(MODEL, 2)
        # The scheduler spreads a model's replicas over the nodes that fit.
        assert sorted(r["node_id"] for r in before) == ["node-a", "node-b"], before
        victim = next(r for r in before if r["node_id"] == "node-b")
        assert victim["pid"] and pid_alive(victim["pid"])

        killed_at = time.monotonic()
        c.nodes["node-b"].kill9()
        # Its engine dies with it (parent-death signal): nothing keeps serving unsupervised.
        c.wait("node-b's engine to die with its agent", lambda: not pid_alive(victim["pid"]), 10)
        c.wait("node-b to show as lost", lambda: c.nodes_by_id()["node-b"]["status"] == "lost",
               float(TIMINGS["node_timeout_s"]) + 10, every_s=0.1)
        lost_s = time.monotonic() - killed_at
        after = c.wait_ready_replicas(MODEL, 2, timeout_s=30, not_on=["node-b"])
        moved_s = time.monotonic() - killed_at
        figure(f"node killed -> lost after {lost_s:.1f}s, replicas ready again after {moved_s:.1f}s "
              f"(node timeout {TIMINGS['node_timeout_s']:.0f}s)")
        assert lost_s >= float(TIMINGS["node_timeout_s"]) - 1.0, "lost before its timeout"
        assert [r["node_id"] for r in after] == ["node-a", "node-a"], after
        assert victim["id"] not in {r["id"] for r in after}
        assert_no_duplicates(after)
        nodes = c.nodes_by_id()
        assert nodes["node-small"]["status"] == "ready"  # it reports; it is only too small
        hold("the replicas to stay put", lambda: len(c.live_replicas(MODEL)) == 2, 1.0)
        watcher.join()
        assert "node-small" not in seen_on, "a replica was placed on a node without the memory"


OUTAGE_S = 30.0  # the issue asks for a 30-second database outage


@pytest.fixture
def private_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    """A PostgreSQL of this test's own, to stop and start again (the session's is shared)."""
    root = Path(tempfile.mkdtemp(prefix="llmgw-pg-"))
    # The label repeats pytest's base temp dir: the suite's leak check sees a server left over.
    cluster = start_cluster(root, label=f"{tmp_path_factory.getbasetemp()}/outage")
    try:
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            cluster.remove()


class Traffic:
    """Chat requests in a loop through the given servers, round-robin, one at a time; each
    outcome is kept with its time and server. With `move_on`, a server that refused a
    connection gets no more requests (a client failing over to the next URL)."""

    def __init__(self, servers: list[Server], key: str, move_on: bool = False,
                 timeout_s: float = 10) -> None:
        self.clients = {s.name: openai.OpenAI(base_url=s.url + "/v1", api_key=key, max_retries=0,
                                              timeout=timeout_s) for s in servers}
        self.move_on = move_on
        self.down: set[str] = set()
        self.results: list[tuple[float, str, str | None]] = []  # (time, server, error or None)
        self._lock = threading.Lock()
        self._bg = Background(self._loop)

    def _loop(self, stop: threading.Event) -> None:
        i = 0
        while not stop.is_set():
            names = [n for n in self.clients if n not in self.down]
            if not names:
                return
            name = names[i % len(names)]
            i += 1
            error: str | None = None
            try:
                reply = self.clients[name].chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
                content = reply.choices[0].message.content or ""
                if not content.startswith("fake reply from port"):
                    error = f"unexpected content {content!r}"
            except openai.APIConnectionError as exc:
                error = f"{type(exc).__name__}: {exc}"
                if self.move_on:
                    self.down.add(name)
            except openai.APIError as exc:
                error = f"{type(exc).__name__}: {exc}"
            with self._lock:
                self.results.append((time.monotonic(), name, error))

    def count(self) -> int:
        with self._lock:
            return len(self.results)

    def wait_more(self, n: int, timeout_s: float = 30) -> None:
        target = self.count() + n
        wait_for(f"{n} more requests", lambda: self.count() >= target, timeout_s, every_s=0.05)

    def stop(self) -> list[tuple[float, str, str | None]]:
        self._bg.join()
        for client in self.clients.values():
            client.close()
        return list(self.results)


def chat(server: Server, key: str) -> str:
    """One chat completion through `server`; the reply's content."""
    with openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0,
                       timeout=10) as client:
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    return reply.choices[0].message.content or ""


def failures(results: list[tuple[float, str, str | None]]) -> list[str]:
    return [f"{name}: {error}" for _t, name, error in results if error]


@pytest.mark.timeout(240)
def test_a_database_outage_keeps_traffic_flowing_and_refuses_admin_writes(
    tmp_path: Path, private_postgres: PostgresCluster,
) -> None:
    with Cluster.up(tmp_path, private_postgres.url, servers=2) as c:
        c.add_node("node-a", cores=4, memory_gb=8)
        c.wait_nodes_ready()
        add_model(c, tmp_path, min_=2)
        serving = {r["id"] for r in c.wait_ready_replicas(MODEL, 2)}
        c.wait_leader()
        first = c.servers[0]
        created = json.loads(first.ctl("--json", "key", "create", "outage-user").stdout)
        user_key = created["key"]
        for server in c.servers:  # a new key reaches each server's cache within its refresh
            # In every worker: each chat is a new connection, which the kernel hands to either
            # of the server's workers, so twelve in a row reach both (a worker that missed the
            # key when the database goes down refuses it for the whole outage).
            c.wait(f"{server.name} to know the new key",
                   lambda s=server: all(chat(s, user_key) is not None for _ in range(12)), 10)
        traffic = Traffic(c.servers, user_key)
        traffic.wait_more(10)

        private_postgres.stop()
        stopped_at = time.monotonic()
        assert not private_postgres.running
        traffic.wait_more(10)  # requests flow with the database gone

        # Admin writes fail, with a clear OpenAI-shaped 503 and no stack trace.
        for server in c.servers:
            try:
                server.call_with_timeout("POST", f"/admin/v1/models/{MODEL}/scale",
                                         {"min": 3, "max": 8}, timeout_s=30)
            except urllib.error.HTTPError as exc:
                status, raw = exc.code, exc.read().decode()
            else:
                raise AssertionError(f"a scale through {server.name} succeeded with no database")
            assert status == 503, raw
            error = json.loads(raw)["error"]
            assert set(error) == {"message", "type", "param", "code"}, error
            assert "Traceback" not in raw and "sqlalchemy" not in raw.lower(), raw
            assert "database" in error["message"].lower(), error
        cli = first.ctl("model", "scale", MODEL, "--min", "3", "--max", "8", check=False)
        assert cli.returncode != 0 and "database" in (cli.stdout + cli.stderr).lower(), cli
        assert "Traceback" not in cli.stdout + cli.stderr, cli.stderr

        wait_for("the outage to last its length",
                 lambda: time.monotonic() - stopped_at >= OUTAGE_S, OUTAGE_S + 5, every_s=0.1)
        during = traffic.count()
        private_postgres.start_again()
        restarted_at = time.monotonic()

        # Everything reconciles: one leader, the scale applies, nothing committed is lost.
        leader = c.wait_leader(timeout_s=30)
        c.wait("a scale to be accepted again",
               lambda: first.ctl("model", "scale", MODEL, "--min", "3", "--max", "8",
                                 check=False).returncode == 0, 30, every_s=0.5)
        after = c.wait_ready_replicas(MODEL, 3, timeout_s=30, server=leader)
        # The engines that served through the outage still serve: a node that could not report
        # while the database was down is not taken for lost once it is back.
        assert serving <= {r["id"] for r in after}, (serving, after)
        reconciled_s = time.monotonic() - restarted_at
        traffic.wait_more(10)
        results = traffic.stop()
        figure(f"database outage {OUTAGE_S:.0f}s: {during} requests until the restart, "
              f"{len(results)} in all, {len(failures(results))} failed; reconciled "
              f"{reconciled_s:.1f}s after the database came back")
        assert not failures(results), failures(results)[:10]
        models = json.loads(first.ctl("--json", "model", "list").stdout)["data"]
        assert [m["name"] for m in models] == [MODEL]
        keys = json.loads(first.ctl("--json", "key", "list").stdout)["data"]
        assert "outage-user" in {k["name"] for k in keys}
        for server in c.servers:
            assert chat(server, user_key).startswith("fake reply from port")
        assert sum(st["leading"] for st in c.statuses().values()) == 1


@pytest.mark.timeout(180)
def test_traffic_through_a_leader_failover(tmp_path: Path, postgres_url: str) -> None:
    with Cluster.up(tmp_path, fresh_database(postgres_url), servers=2) as c:
        c.add_node("node-a", cores=4, memory_gb=8)
        c.add_node("node-b", cores=2, memory_gb=4)
        c.wait_nodes_ready()
        add_model(c, tmp_path, min_=2)
        c.wait_ready_replicas(MODEL, 2)
        leader = c.wait_leader()
        survivor = next(s for s in c.servers if s is not leader)
        c.wait_routed(MODEL, leader.admin_key)
        # One request at a time, round-robin over both URLs; after a refused connection the
        # client moves on to the other URL, as a client with a list of servers does.
        traffic = Traffic(c.servers, leader.admin_key, move_on=True)
        traffic.wait_more(20)
        killed_at = time.monotonic()
        leader.kill9()
        c.wait(f"{survivor.name} to lead", lambda: survivor.cluster()["leading"], TTL_S + 10,
               every_s=0.1)
        took_over_s = time.monotonic() - killed_at
        traffic.wait_more(20)
        results = traffic.stop()

        after = [r for r in results if r[0] >= killed_at]
        to_killed = [r for r in results if r[1] == leader.name]
        to_survivor = [r for r in results if r[1] == survivor.name]
        failed_killed = [r for r in to_killed if r[2]]
        failed_survivor = [r for r in to_survivor if r[2]]
        total, failed = len(results), len(failed_killed) + len(failed_survivor)
        rate = failed / total
        figure(f"traffic through failover: {total} requests ({len(after)} after the kill), "
              f"{failed} failed = {rate:.1%} error rate; {len(failed_killed)} to the killed "
              f"leader, {len(failed_survivor)} to the survivor; new leader after "
              f"{took_over_s:.2f}s")
        # The data plane does not depend on the leader: the survivor serves every request it
        # gets, before, during and after the election.
        assert not failed_survivor, failures(failed_survivor)
        # Only requests addressed to the dead process fail: the one in flight when it died or
        # the next one sent to it, after which the client moves on. One loop, so at most one.
        assert len(failed_killed) <= 1, failures(failed_killed)
        assert all("Connection" in (r[2] or "") for r in failed_killed), failures(failed_killed)
        # Hence the bound: one failure in the 40 or more requests made around the kill.
        assert total >= 40 and rate <= 1 / 40, f"error rate {rate:.1%}"


@pytest.mark.timeout(240)
def test_the_real_engine_serves_through_both_servers(tmp_path: Path, postgres_url: str) -> None:
    with Cluster.up(tmp_path, fresh_database(postgres_url), servers=2, real_engine=True,
                    init_args=("--demo", "--no-guard")) as c:
        c.add_node("node-a", cores=2, memory_gb=4)
        c.wait_nodes_ready()
        ready = c.wait_ready_replicas(DEMO, 1, timeout_s=180)
        assert ready[0]["node_id"] == "node-a" and ready[0]["endpoint"].startswith("http://127.0.0.11:")
        c.wait_routed(DEMO, c.servers[0].admin_key, timeout_s=60)
        for server in c.servers:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.admin_key,
                                   max_retries=0, timeout=120)
            raw = client.chat.completions.with_raw_response.create(
                model=DEMO, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8)
            reply = raw.parse()
            client.close()
            assert raw.status_code == 200
            assert reply.model == DEMO
            assert (reply.choices[0].message.content or "").strip(), reply
