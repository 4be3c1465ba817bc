"""`llmgw server run --workers 2`, the real processes: limits hold exactly across the workers,
usage adds up to what clients counted, a killed worker is replaced while the other keeps
serving, a revoked key (or one whose team admin is revoked) is refused by every worker, and
`kill -9` of the server takes its workers along. Requests go over new connections each time, so
the kernel spreads them over both workers; the request id's per-process prefix says which
worker answered."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from llmgw.store.store import Store
from tests.fakes.provider import USAGE, FakeProvider
from tests.support.server_process import LLMGW, LlmgwServer, pid_alive

WORKERS = 2


@dataclass
class Served:
    """A running `server run --workers 2` in front of a fake provider as model `m`."""

    server: LlmgwServer
    proc: subprocess.Popen[str]
    provider: FakeProvider

    @property
    def url(self) -> str:
        return self.server.url

    def worker_pids(self) -> list[int]:
        return [c.pid for c in psutil.Process(self.proc.pid).children()
                if "llmgw.server.worker" in " ".join(c.cmdline())]

    async def admin(self, method: str, path: str, body: Any = None, key: str | None = None) -> Any:
        """The admin API's answer, asked with the admin key (or `key`)."""
        async with aiohttp.ClientSession() as s, s.request(
                method, self.url + path, json=body,
                headers={"Authorization": f"Bearer {key or self.server.admin_key}"}) as resp:
            assert resp.status < 300, await resp.text()
            return await resp.json()

    async def key(self, minter: str | None = None, /, **limits: int) -> tuple[str, str]:
        """A new user key's secret and id (minted by `minter`, else the admin key), once every
        worker knows it (each refreshes its keys from the store on its own): `/v1/models`,
        which no limit counts, answers it twenty times in a row on new connections, which land
        on either worker."""
        made = await self.admin("POST", "/admin/v1/keys", {"name": f"k{time.monotonic_ns()}",
                                                           "limits": limits}, minter)
        deadline, good = time.monotonic() + 15, 0
        while good < 20:
            assert time.monotonic() < deadline, "a new key never reached every worker"
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s, \
                    s.get(self.url + "/v1/models",
                          headers={"Authorization": f"Bearer {made['key']}"}) as resp:
                good = good + 1 if resp.status == 200 else 0
        return made["key"], made["id"]


@dataclass
class Answer:
    status: int
    worker: str  # the request id's per-process prefix
    tokens: int


async def chat(url: str, key: str, max_tokens: int = 8) -> Answer:
    """One chat completion over a connection of its own."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s, \
            s.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                   json={"model": "m", "max_tokens": max_tokens,
                         "messages": [{"role": "user", "content": "hi"}]}) as resp:
        body = await resp.json()
        rid = resp.headers.get("X-Request-Id", "")
        usage = body.get("usage") or {} if resp.status == 200 else {}
        return Answer(resp.status, rid.rsplit("-", 1)[0],
                      int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0)))


async def many(url: str, key: str, n: int, at_once: int = 8) -> list[Answer]:
    gate = asyncio.Semaphore(at_once)

    async def one() -> Answer:
        async with gate:
            return await chat(url, key)

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def both_workers_answer(served: Served, key: str, timeout_s: float = 30) -> set[str]:
    """The workers seen answering, once both are (a new worker may still be starting)."""
    deadline, seen = time.monotonic() + timeout_s, set()
    while time.monotonic() < deadline:
        seen |= {a.worker for a in await many(served.url, key, 8) if a.status == 200}
        if len(seen) >= WORKERS:
            return seen
    raise AssertionError(f"only {seen} answered within {timeout_s}s")


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    provider = await FakeProvider().start()
    server = await asyncio.to_thread(LlmgwServer.init, tmp_path / "data", "--no-guard",
                                     "--no-embedded-node")
    log = open(server.log_path, "a")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([*LLMGW, "server", "run", "--workers", str(WORKERS),
                             "--log-format", "text"],
                            env=server.env, stdout=log, stderr=subprocess.STDOUT, text=True)
    s = Served(server, proc, provider)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                await s.admin("GET", "/admin/v1/cluster")
                break
            except (aiohttp.ClientError, AssertionError):
                assert proc.poll() is None and time.monotonic() < deadline, server.log()
                await asyncio.sleep(0.2)
        await asyncio.to_thread(server.ctl, "model", "add", "m", "--base-url", provider.url)
        yield s
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 60)
        log.close()
        await provider.close()


def usage_rows(served: Served, key_id: str) -> tuple[int, int]:
    """Requests and tokens the store holds for the key."""
    url = f"sqlite:///{served.server.data_dir / 'llmgw.db'}"
    store = Store.open(url)
    try:
        rows = store.usage.usage(key_id=key_id)
    finally:
        store.close()
    return (sum(r.requests for r in rows),
            sum(r.prompt_tokens + r.completion_tokens for r in rows))


async def test_usage_through_two_workers_equals_what_clients_counted(served: Served) -> None:
    key, key_id = await served.key()
    await both_workers_answer(served, key)

    answers = await many(served.url, key, 120, at_once=16)

    assert {a.status for a in answers} == {200}
    assert len({a.worker for a in answers}) == WORKERS, "both workers took requests"
    text = (await _metrics(served)).splitlines()
    counted = sum(float(line.rsplit(" ", 1)[1]) for line in text
                  if line.startswith("llmgw_requests_total{") and 'model="m"' in line)
    # /metrics sums both workers in one scrape (and the warm-up requests of `both_workers_answer`).
    assert counted >= 120
    served.proc.send_signal(signal.SIGTERM)  # a clean stop: every worker writes what is left
    assert await asyncio.to_thread(served.proc.wait, 60) == 0
    requests, tokens = usage_rows(served, key_id)
    assert requests == counted
    assert tokens == counted * (USAGE["prompt_tokens"] + USAGE["completion_tokens"])
    assert sum(a.tokens for a in answers) == 120 * USAGE["total_tokens"]


async def _metrics(served: Served) -> str:
    async with aiohttp.ClientSession() as s, s.get(
            served.url + "/metrics",
            headers={"Authorization": f"Bearer {served.server.admin_key}"}) as resp:
        assert resp.status == 200
        return await resp.text()


async def _wait_for_minute_start() -> None:
    # Clock minutes are the windows: a run that crossed one would see two.
    second = datetime.now(UTC).second
    if second > 45:
        await asyncio.sleep(61 - second)


@pytest.mark.parametrize("limit", ["rpm", "tpm"])
async def test_minute_limits_hold_exactly_across_two_workers_and_their_syncs(
        served: Served, limit: str) -> None:
    per_request = USAGE["prompt_tokens"] + USAGE["completion_tokens"]
    value = 20 if limit == "rpm" else 20 * per_request
    key, _ = await served.key(**{limit: value})
    await _wait_for_minute_start()
    rate, answers = 8.0, []  # requests per second, both workers together
    for _ in range(40):
        started = time.monotonic()
        answers.append(await chat(served.url, key, max_tokens=1))
        await asyncio.sleep(max(0.0, 1 / rate - (time.monotonic() - started)))

    admitted = [a for a in answers if a.status == 200]
    assert {a.status for a in answers} <= {200, 429}
    assert len({a.worker for a in admitted}) == WORKERS
    # Five seconds of requests: every worker synced with the store several times meanwhile.
    if limit == "rpm":
        assert len(admitted) == 20, [a.status for a in answers]
    else:
        # Each request reserves max_tokens plus a token per 4 bytes of body (about 25 here)
        # and settles to the 14 it used: the window is full once the next reservation no
        # longer fits, never past it.
        used = sum(a.tokens for a in admitted)
        assert value - 30 < used <= value, (used, [a.status for a in answers])


async def test_a_concurrent_burst_over_both_workers_admits_exactly_the_rpm(served: Served) -> None:
    free, _ = await served.key()
    await both_workers_answer(served, free)  # the second worker is up and accepting
    await _wait_for_minute_start()
    reached: set[str] = set()
    for _ in range(4):  # the kernel may hand one burst's connections to one worker
        key, _ = await served.key(rpm=20)
        answers = await many(served.url, key, 60, at_once=60)
        assert {a.status for a in answers} <= {200, 429}
        assert len([a for a in answers if a.status == 200]) == 20  # not 40: one window
        reached = {a.worker for a in answers}
        if len(reached) == WORKERS:
            break
    assert len(reached) == WORKERS, "no burst reached both workers"


async def test_a_killed_worker_is_replaced_and_the_others_keep_serving(served: Served) -> None:
    key, _ = await served.key()
    before = await both_workers_answer(served, key)
    [victim] = served.worker_pids()

    os.kill(victim, signal.SIGKILL)
    # Connections it had accepted or queued die with it, and so do those that reach it while it
    # dies: its listening socket closes only when its last thread is gone, after its main
    # thread already shows as a zombie. So wait until the server has reaped it (and logged so).
    exited = f"worker 1 (pid {victim}) exited with -9"
    deadline = time.monotonic() + 10
    while exited not in served.server.log():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    answers = await many(served.url, key, 40)  # while it is gone and restarting

    assert {a.status for a in answers} == {200}
    deadline = time.monotonic() + 30
    while not (pids := served.worker_pids()) or pids == [victim]:
        assert time.monotonic() < deadline, served.server.log()
        await asyncio.sleep(0.2)
    after = await both_workers_answer(served, key)
    assert len(after - before) == 1, "the new worker answers (a new process: a new id prefix)"


async def test_a_revoked_key_is_refused_by_every_worker(served: Served) -> None:
    key, key_id = await served.key()
    await both_workers_answer(served, key)

    await served.admin("POST", f"/admin/v1/keys/{key_id}/revoke")
    answers = await many(served.url, key, 40)

    # An admin change refreshes every worker before its answer, which is sooner than
    # refresh_interval_s: no request after the revoke gets through, whichever worker takes it.
    assert {a.status for a in answers} == {401}
    assert len({a.worker for a in answers}) == WORKERS


async def test_a_key_minted_by_a_revoked_team_admin_is_refused_by_every_worker(
        served: Served) -> None:
    await served.admin("POST", "/admin/v1/teams", {"name": "red"})
    lead = await served.admin("POST", "/admin/v1/keys", {"name": "lead", "team": "red",
                                                         "team_admin": True})
    key, _ = await served.key(lead["key"])
    await both_workers_answer(served, key)

    await served.admin("POST", f"/admin/v1/keys/{lead['id']}/revoke")
    answers = await many(served.url, key, 40)

    assert {a.status for a in answers} == {401}
    assert len({a.worker for a in answers}) == WORKERS


async def test_a_killed_server_takes_its_workers_along(served: Served) -> None:
    workers = served.worker_pids()
    assert len(workers) == WORKERS - 1

    served.proc.kill()
    await asyncio.to_thread(served.proc.wait, 10)

    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in workers):
        assert time.monotonic() < deadline, "a worker outlived its server"
        await asyncio.sleep(0.1)


async def cached_chat(url: str, key: str) -> tuple[str, str]:
    """One deterministic chat completion over a connection of its own: which worker answered,
    and the cache's word on it."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s, \
            s.post(url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                   json={"model": "m", "temperature": 0,
                         "messages": [{"role": "user", "content": "How wide is the sea?"}]}) as resp:
        assert resp.status == 200, await resp.text()
        return (resp.headers["X-Request-Id"].rsplit("-", 1)[0],
                resp.headers.get("X-Llmgw-Cache", "none"))


async def test_the_response_cache_is_one_for_every_worker_and_a_purge_empties_it(
        served: Served) -> None:
    key, key_id = await served.key()
    await both_workers_answer(served, key)
    await asyncio.to_thread(served.server.ctl, "model", "cache", "m", "--cache", "exact")
    before = len(served.provider.requests)

    first = await cached_chat(served.url, key)
    later = [await cached_chat(served.url, key) for _ in range(30)]

    assert first[1] == "miss"
    assert {word for _, word in later} == {"hit"}, "a worker missed the answer another kept"
    assert len({worker for worker, _ in [first, *later]}) == WORKERS
    assert len(served.provider.requests) == before + 1
    stats = await served.admin("GET", "/admin/v1/cache")
    (m,) = [row for row in stats["models"] if row["model"] == "m"]
    assert stats["store"] == "file" and m["entries"] == 1

    await asyncio.to_thread(served.server.ctl, "cache", "purge")
    # The purge empties the file at once, so the first request after it misses, whichever worker
    # takes it. A worker learns of the purge at its next refresh and may miss once more before
    # that (it never finds a purged answer); then the answer kept again is a hit on every worker.
    after: list[tuple[str, str]] = []
    deadline = time.monotonic() + 15
    while len(after) < 10 or len({worker for worker, word in after if word == "hit"}) < WORKERS:
        assert time.monotonic() < deadline, f"the workers never all hit after the purge: {after}"
        after.append(await cached_chat(served.url, key))
    misses = [word for _, word in after].count("miss")
    assert after[0][1] == "miss"
    assert misses <= WORKERS, after
    assert len(served.provider.requests) == before + 1 + misses


async def test_a_burst_of_cache_hits_over_both_workers_admits_exactly_the_rpm(served: Served) -> None:
    free, _ = await served.key()
    await both_workers_answer(served, free)
    await asyncio.to_thread(served.server.ctl, "model", "cache", "m", "--cache", "exact")
    await _wait_for_minute_start()
    key, _ = await served.key(rpm=20)

    async def one() -> tuple[int, str, str]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s, \
                s.post(served.url + "/v1/chat/completions",
                       headers={"Authorization": f"Bearer {key}"},
                       json={"model": "m", "temperature": 0,
                             "messages": [{"role": "user", "content": "How wide is the sea?"}]}
                       ) as resp:
            await resp.read()
            return (resp.status, resp.headers.get("X-Request-Id", "").rsplit("-", 1)[0],
                    resp.headers.get("X-Llmgw-Cache", ""))

    assert (await one())[2] == "miss"  # kept: every request of the burst is a hit
    answers = await asyncio.gather(*(one() for _ in range(60)))

    assert {status for status, _, _ in answers} == {200, 429}
    # 19, not 38: the miss took one of the minute's 20, and hits count like any request.
    assert len([a for a in answers if a[0] == 200]) == 19
    assert {word for status, _, word in answers if status == 200} == {"hit"}
