"""On-demand models across servers on a real PostgreSQL: two `llmgw server run`, one node agent,
the real llama-server on the demo GGUF, the official openai client.

The keepers' own passes are set 300 s apart, so a cold start within seconds can only come from
the demand a server records waking the leader. Every real engine start waits LOAD_DELAY_S
first (a slow disk): a window in which a model is loading, to kill the leader in.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import openai
import pytest

from tests.e2e.test_ondemand import add_on_demand, ask, client_for, demo_gguf, figure
from tests.support.cluster import TIMINGS, Cluster, Server, hold, metric, metrics_text, real_engine_wrapper
from tests.support.pg import fresh_database

KEEPER_INTERVAL_S = 300.0
LOAD_DELAY_S = 3.0
QUEUE_TIMEOUT_S = 60.0
TTL_S = float(TIMINGS["leader_ttl_s"])
# The wake-up, the node's next report, the delay, loading on a busy 2-core machine.
COLD_START_S = 45.0


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("ondemand-ha")
    gguf = demo_gguf(root)
    with Cluster.up(root, fresh_database(postgres_url), servers=2,
                    engine=real_engine_wrapper(root, delay_s=LOAD_DELAY_S),
                    settings={"keeper_interval_s": KEEPER_INTERVAL_S,
                              "queue_timeout_s": QUEUE_TIMEOUT_S}) as c:
        c.add_node("node-a", cores=4, memory_gb=8)
        c.wait_nodes_ready()
        for name in ("od-follower", "od-failover", "od-orphan"):
            add_on_demand(c.any_server(), name, gguf, 1.0)
        yield c


def other_than(c: Cluster, server: Server) -> Server:
    return next(s for s in c.servers if s is not server)


@pytest.mark.timeout(240)
def test_a_request_to_a_follower_wakes_the_leader_and_is_answered(ha: Cluster) -> None:
    c = ha
    with c.explained():
        leader = c.wait_leader()
        follower = other_than(c, leader)
        assert not c.live_replicas("od-follower")
        sent = time.monotonic()
        with client_for(follower, timeout_s=QUEUE_TIMEOUT_S + 30) as client:
            assert ask(client, "od-follower").strip()
        took = time.monotonic() - sent
        figure(f"cold start through a follower: {took:.2f}s (engine start delayed {LOAD_DELAY_S:g}s; "
               f"keeper passes {KEEPER_INTERVAL_S:g}s apart)")
        assert took < COLD_START_S, f"answered after {took:.1f}s: the keeper was not woken"
        [replica] = c.live_replicas("od-follower")
        assert replica["state"] == "ready" and replica["node_id"] == "node-a", replica
        assert c.leader() is leader  # the leader placed it; nobody else took over
        leader_text, follower_text = metrics_text(leader), metrics_text(follower)
        starts = sum(metric(t, "llmgw_cold_starts_total", model="od-follower")
                     for t in (leader_text, follower_text))
        assert starts >= 1, "no cold start in either server's /metrics"
        assert metric(follower_text, "llmgw_queue_wait_seconds_count") >= 1


Outcome = tuple[str, str]  # ("ok", content) | ("503", message) | ("bad", what came back)


def queued_requests(server: Server, model: str, n: int) -> tuple[list[threading.Thread], list[Outcome]]:
    """`n` chat requests for `model` to `server`, each in a thread; outcomes in arrival order."""
    outcomes: list[Outcome] = []

    def one() -> None:
        try:
            with client_for(server, timeout_s=QUEUE_TIMEOUT_S + 30) as client:
                outcomes.append(("ok", ask(client, model)))
        except openai.APIStatusError as exc:
            clean = exc.status_code == 503 and model in exc.message
            outcomes.append(("503" if clean else "bad", f"{exc.status_code}: {exc.message}"))
        except Exception as exc:  # a hang (client timeout), a dropped connection: all failures
            outcomes.append(("bad", f"{type(exc).__name__}: {exc}"))

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads, outcomes


def join_all(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(QUEUE_TIMEOUT_S + 45)
        assert not t.is_alive(), "a queued request hung past the queue's timeout"


def kill_leader_and_drain(c: Cluster, leader: Server, successor: Server,
                          threads: list[threading.Thread]) -> float:
    """kill -9 the leader, wait for `successor` to lead and for every queued request to end;
    the seconds from the kill."""
    killed_at = time.monotonic()
    leader.kill9()
    c.wait(f"{successor.name} to lead", lambda: successor.cluster()["leading"], TTL_S + 10,
           every_s=0.1)
    join_all(threads)
    return time.monotonic() - killed_at


def assert_one_replica_stays(c: Cluster, model: str, server: Server) -> None:
    """One ready replica, and it stays: the new leader neither duplicated nor stopped it."""
    c.wait_ready_replicas(model, 1, timeout_s=COLD_START_S, server=server)
    hold(f"exactly one live replica of {model}", lambda: len(c.live_replicas(model, server)) == 1,
         2.0)


@pytest.mark.timeout(300)
def test_a_leader_killed_while_a_model_loads(ha: Cluster) -> None:
    c = ha
    with c.explained():
        leader = c.wait_leader()
        survivor = other_than(c, leader)
        threads, outcomes = queued_requests(survivor, "od-failover", 3)
        c.wait("od-failover to be loading", lambda: [
            r["state"] for r in c.live_replicas("od-failover", survivor)] == ["starting"],
            COLD_START_S, every_s=0.05)
        took = kill_leader_and_drain(c, leader, survivor, threads)
        figure(f"leader killed while od-failover loaded: {len(outcomes)} queued requests -> "
               f"{[kind for kind, _ in outcomes]} within {took:.2f}s of the kill")
        assert len(outcomes) == 3
        assert not [o for o in outcomes if o[0] == "bad"], outcomes
        assert_one_replica_stays(c, "od-failover", survivor)
        with client_for(survivor) as client:
            assert ask(client, "od-failover").strip()


@pytest.mark.timeout(300)
def test_a_leader_that_dies_before_placing_leaves_the_cold_start_to_the_next(ha: Cluster) -> None:
    c = ha
    with c.explained():
        for server in c.servers:  # one may have been killed by the test before
            if not server.running:
                server.paused = False
                server.launch()
                server.wait_up()
        leader = c.wait_leader()
        follower = other_than(c, leader)
        leader.pause()  # it still holds the lease: nobody places anything until it expires
        threads, outcomes = queued_requests(follower, "od-orphan", 2)
        c.wait("the follower to queue the requests", lambda: metric(
            metrics_text(follower), "llmgw_queue_depth", model="od-orphan") == 2, 10, every_s=0.1)
        assert not c.live_replicas("od-orphan", follower)
        took = kill_leader_and_drain(c, leader, follower, threads)
        figure(f"leader paused then killed before placing od-orphan: {[k for k, _ in outcomes]} "
               f"{took:.2f}s after the kill")
        assert [kind for kind, _ in outcomes] == ["ok", "ok"], outcomes
        assert_one_replica_stays(c, "od-orphan", follower)

