"""Fair shares of a busy model: one team's batch against another team's interactive user.

    .venv/bin/python bench/fairness.py [--batch 16] [--singles 8] [--window 40] [--parallel 2]
                                       [--spare 0] [--queue-timeout 600] [--keep]

One install as a user gets it (`server init --no-guard`, `server run` with its embedded node,
SQLite); the demo GGUF (Gemma 3 270M Q4_K_M) on one replica of one core, `--parallel 2` (or
`--parallel`), `[control] fair_spare_slots` 0 (or `--spare`). Team `batch` keeps `--batch` long
requests in flight (64 tokens each); team `interactive` sends one short streamed request at a
time (8 tokens), `--singles` of them. Three phases, one after the other on the same replica: the
interactive user alone, the batch alone for `--window` seconds, and both together. Reported: the
interactive user's time to first token p50/p95 alone and with the batch busy, and the batch's
tokens per second alone and with the user (streamed tokens, counted as they arrive). Written to
bench/results/fairness.md and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ondemand import Install, log  # noqa: E402

from bench import record  # noqa: E402

MODEL = "bench-fair"
ARGS = "--ctx-size 4096 --parallel {parallel} --metrics --no-jinja --chat-template gemma"
LONG, SHORT = 64, 8  # answer tokens of a batch request, of an interactive one


async def ask(client: aiohttp.ClientSession, url: str, key: str, text: str,
              tokens: int, streamed: list[int] | None = None) -> float:
    """One streamed request of exactly `tokens` answer tokens; its time to first token. Each
    content event (one token) adds one to `streamed[0]` as it arrives."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": tokens,
            "temperature": 0, "stream": True, "ignore_eos": True}
    sent = time.monotonic()
    first: float | None = None
    async with client.post(url + "/v1/chat/completions", json=body,
                           headers={"Authorization": f"Bearer {key}"}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.read())[:300]!r}")
        async for raw in resp.content:
            line = raw.decode().strip()
            if line.startswith("data: {") and '"content":"' in line:
                if first is None:
                    first = time.monotonic()
                if streamed is not None:
                    streamed[0] += 1
    if first is None:
        raise RuntimeError("the stream carried no content")
    return first - sent


async def phase(url: str, batch_key: str | None, single_key: str | None, batch: int,
                singles: int, window_s: float, admin_key: str = "") -> dict[str, Any]:
    """The batch (when `batch_key`) keeps `batch` requests in flight while the interactive user
    (when `single_key`) sends `singles` one at a time, or for `window_s` without one."""
    ttfts: list[float] = []
    streamed = [0]  # the batch's tokens as they arrive: a short window counts what is in flight
    stop = asyncio.Event()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as client:

        async def batch_lane(n: int) -> None:
            while not stop.is_set():
                await ask(client, url, batch_key or "", f"Write a long story, part {n}.", LONG,
                          streamed)

        async def user() -> None:
            for n in range(singles):
                ttfts.append(await ask(client, url, single_key or "", f"Say hi ({n}).", SHORT))

        async def watch() -> None:
            # What each side holds while the batch runs: held in llmgw, queued and running in
            # llama-server (every 10 s, the first once its backlog formed).
            await asyncio.sleep(3)
            while not stop.is_set():
                async with client.get(url + "/metrics",
                                      headers={"Authorization": f"Bearer {admin_key}"}) as resp:
                    shown = await resp.text()
                log(" ".join(line.split("{", 1)[0].removeprefix("llmgw_") + "=" + line.split()[-1]
                             for line in shown.splitlines() if line.startswith(
                    ("llmgw_fair_queue_depth{", "llmgw_replica_queued_requests{",
                     "llmgw_replica_running_requests{"))))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 10)

        lanes = [asyncio.create_task(batch_lane(n)) for n in range(batch)] if batch_key else []
        watcher = asyncio.create_task(watch()) if batch_key and admin_key else None
        started = time.monotonic()
        if single_key:
            await user()
        else:
            await asyncio.sleep(window_s)  # the batch alone, for its throughput
        elapsed = time.monotonic() - started
        counted = streamed[0]
        stop.set()
        await asyncio.gather(*lanes, *([watcher] if watcher else []))
    figures: dict[str, Any] = {"elapsed_s": round(elapsed, 1)}
    if ttfts:
        ordered = sorted(ttfts)
        figures["ttft_p50_s"] = round(statistics.median(ordered), 3)
        figures["ttft_p95_s"] = round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 3)
    if batch_key:
        figures["batch_tokens_per_s"] = round(counted / elapsed, 1)
    return figures


def key_of(out: str) -> str:
    found = re.search(r"sk-llmgw-\S+", out)
    if found is None:
        raise RuntimeError(f"no key in: {out[:200]}")
    return found.group(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--singles", type=int, default=8)
    parser.add_argument("--window", type=float, default=40.0)
    parser.add_argument("--parallel", type=int, default=2, help="the replica's slots")
    parser.add_argument("--spare", type=int, default=0, help="[control] fair_spare_slots")
    parser.add_argument("--queue-timeout", type=float, default=600.0,
                        help="[control] queue_timeout_s: a busy shared machine is slow")
    parser.add_argument("--keep", action="store_true", help="keep the install's temp dir")
    args = parser.parse_args()
    engine_args = ARGS.format(parallel=args.parallel)
    load_before, code = round(os.getloadavg()[0], 2), record.commit()
    root = Path(tempfile.mkdtemp(prefix="llmgw-bench-fair-"))
    install = Install(root, {"fair_spare_slots": str(args.spare),
                             "queue_timeout_s": str(args.queue_timeout)})
    results: dict[str, Any] = {}
    try:
        install.start()
        ctl = install.server.ctl
        ctl("model", "add", MODEL, "--path", str(install.gguf), "--cores", "1", "--memory-gb", "1",
            "--args", engine_args, "--min", "1", "--max", "1")
        install.server.wait_ready(MODEL, 300)
        for team in ("batch", "interactive"):
            ctl("team", "create", team)
        batch_key = key_of(ctl("key", "create", "batch-job", "--team", "batch").stdout)
        user_key = key_of(ctl("key", "create", "user", "--team", "interactive").stdout)
        url = install.server.url
        for _ in range(30):  # warm the replica, once the server's snapshot has the new keys
            try:
                asyncio.run(phase(url, None, user_key, 0, 2, 0))
                break
            except RuntimeError:
                time.sleep(1)
        log("the interactive user alone")
        results["user alone"] = asyncio.run(phase(url, None, user_key, 0, args.singles, 0))
        log("the batch alone")
        results["batch alone"] = asyncio.run(phase(url, batch_key, None, args.batch, 0, args.window,
                                                   install.server.admin_key))
        log("both")
        results["both"] = asyncio.run(phase(url, batch_key, user_key, args.batch, args.singles, 0,
                                             install.server.admin_key))
    except BaseException:
        log("last lines of the server's log:\n" + "\n".join(install.server.log().splitlines()[-30:]))
        raise
    finally:
        install.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    alone, both, batch = results["user alone"], results["both"], results["batch alone"]
    lines = [
        "| figure | alone | with the other team busy | ratio |", "| --- | ---: | ---: | ---: |",
        f"| interactive TTFT p50 (s) | {alone['ttft_p50_s']} | {both['ttft_p50_s']} | "
        f"{both['ttft_p50_s'] / alone['ttft_p50_s']:.2f}× |",
        f"| interactive TTFT p95 (s) | {alone['ttft_p95_s']} | {both['ttft_p95_s']} | "
        f"{both['ttft_p95_s'] / alone['ttft_p95_s']:.2f}× |",
        f"| batch tokens/s | {batch['batch_tokens_per_s']} | {both['batch_tokens_per_s']} | "
        f"{both['batch_tokens_per_s'] / batch['batch_tokens_per_s']:.2f}× |",
    ]
    table = "\n".join(lines)
    print(table)  # noqa: T201
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fairness.md").write_text(table + "\n")
    meta = record.meta(load_before, code, command=" ".join(["bench/fairness.py", *sys.argv[1:]]),
                       settings=vars(args) | {"args": engine_args})
    record.write(out / "fairness.json", "fairness", meta, results)
    print(json.dumps(results))  # noqa: T201


if __name__ == "__main__":
    main()
