"""What shared admission costs: a request's admission and settlement through a real Redis
beside the in-memory path, side by side in one run, and bursts that show the limit holding.

    .venv/bin/python bench/shared_limits.py [--requests N]

Starts its own redis-server (Debian's package) on a free port. Prints, for the in-memory
limiter and the Redis one (a key with rpm, tpm, concurrency and a day budget, as the request
path checks them):
- p50 and p99 of one admission at concurrency 1 (what a request waits for before it is sent),
- admissions per second at concurrency 32,
- bursts over four limiters (four processes of one install), admitted / limit for both paths
  (the in-memory one counts per process): 60 requests against `rpm 20`; 12 held at once against
  `concurrent 3`; three minted keys bursting against their minter's `rpm 6`; rounds of requests
  against a day budget of 1,000 tokens, each reserving and using 100 (spent / budget).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime

from llmgw.core.errors import RateLimited
from llmgw.core.settings import LimitsSettings
from llmgw.core.types import ApiKey, KeyScope, Limits
from llmgw.gateway.auth import KeyCache
from llmgw.gateway.limits import Limiter, Ticket
from llmgw.gateway.shared_limits import connect


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def key(n: int, **limits: int) -> ApiKey:
    return ApiKey(id=f"key-bench-{n}", name=f"bench {n}", prefix="sk-llmgw-bnch", last4="0000",
                  hash="0" * 64, scope=KeyScope.USER, limits=Limits(**limits))


def now() -> datetime:
    return datetime.now(UTC)


async def admit(limiter: Limiter, k: ApiKey, reserve: int) -> Ticket:
    return await limiter.admit_shared(k, reserve) if limiter.shared else limiter.admit(k, reserve)


async def latency(limiter: Limiter, n: int) -> tuple[float, float]:
    k = key(1, rpm=10**9, tpm=10**12, concurrent=10**6, tokens_per_day=10**12)
    took = []
    for _ in range(n):
        started = time.perf_counter()
        ticket = await admit(limiter, k, 100)
        took.append(time.perf_counter() - started)
        ticket.settle(80)
    took.sort()
    return statistics.median(took) * 1000, took[int(len(took) * 0.99)] * 1000


async def throughput(limiter: Limiter, n: int, concurrency: int = 32) -> float:
    k = key(2, rpm=10**9, tpm=10**12, concurrent=10**6, tokens_per_day=10**12)
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            (await admit(limiter, k, 100)).settle(80)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - started)


async def burst(limiters: list[Limiter], k: ApiKey, n: int = 60,
                reserve: int = 0) -> list[Ticket]:
    """`n` admissions at once over `limiters`: the tickets of those admitted (not settled)."""
    async def one(i: int) -> Ticket | None:
        try:
            return await admit(limiters[i % len(limiters)], k, reserve)
        except RateLimited:
            return None
    return [t for t in await asyncio.gather(*(one(i) for i in range(n))) if t is not None]


async def settled(limiters: list[Limiter], tickets: list[Ticket], tokens: int) -> None:
    """Settle `tickets` and wait until Redis has every settlement (a PING after them)."""
    for t in tickets:
        t.settle(tokens)
    await asyncio.sleep(0)
    for limiter in limiters:
        if limiter.shared is not None:
            await limiter.shared.pipe.call("PING")


async def bursts(limiters: list[Limiter], n: int) -> str:
    """The four exactness figures for one path, as admitted / limit."""
    rpm = len(await burst(limiters, key(10 + n, rpm=20)))
    held = await burst(limiters, key(20 + n, concurrent=3), 12)
    await settled(limiters, held, 0)
    minter = key(30 + n, rpm=6)
    children = [key(40 + n + i).model_copy(update={"minted_by": minter.id}) for i in range(3)]
    cache = KeyCache(b"", [minter, *children])
    for limiter in limiters:
        limiter.keys = lambda: cache
    family = sum(len(t) for t in await asyncio.gather(*(burst(limiters, c, 6) for c in children)))
    budget, spent = key(50 + n, tokens_per_day=1000), 0
    for _ in range(5):
        tickets = await burst(limiters, budget, 8, reserve=100)
        await settled(limiters, tickets, 100)
        spent += 100 * len(tickets)
    return f"rpm {rpm}/20, concurrent {len(held)}/3, family {family}/6, day budget {spent}/1000"


async def main(requests: int) -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed: apt-get install redis-server")
    port, tmp = free_port(), tempfile.mkdtemp(prefix="llmgw-bench-redis-")
    proc = subprocess.Popen([binary, "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", tmp], stdout=subprocess.DEVNULL)
    try:
        await asyncio.sleep(0.3)
        settings = LimitsSettings(redis_url=f"redis://127.0.0.1:{port}/0", redis_timeout_ms=1000)
        local = Limiter(None, now)
        shared = Limiter(None, now, shared=connect(settings))
        await latency(shared, 200)  # connections made, script loaded
        print(f"{'path':<10} {'p50 c1 ms':>10} {'p99 c1 ms':>10} {'admits/s c32':>13}")
        rows = {}
        for _ in range(2):  # alternate, so a noisy moment hits both
            for name, limiter in (("in-memory", local), ("redis", shared)):
                p50, p99 = await latency(limiter, requests)
                rate = await throughput(limiter, requests)
                rows.setdefault(name, []).append((p50, p99, rate))
        for name, runs in rows.items():
            p50 = min(r[0] for r in runs)
            p99 = min(r[1] for r in runs)
            rate = max(r[2] for r in runs)
            print(f"{name:<10} {p50:>10.3f} {p99:>10.3f} {rate:>13,.0f}")
        added = min(r[0] for r in rows["redis"]) - min(r[0] for r in rows["in-memory"])
        print(f"shared admission adds {added:.3f} ms at p50 (concurrency 1)")
        four_local = [Limiter(None, now) for _ in range(4)]
        four_shared = [Limiter(None, now, shared=connect(settings)) for _ in range(4)]
        print("bursts over 4 processes, admitted / limit:")
        print(f"  in-memory (per process): {await bursts(four_local, 0)}")
        print(f"  redis:                   {await bursts(four_shared, 1)}")
        for limiter in [shared, *four_shared]:
            assert limiter.shared is not None
            await limiter.shared.close()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    asyncio.run(main(parser.parse_args().requests))
