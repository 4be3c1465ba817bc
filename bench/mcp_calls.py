"""MCP tool calls: what llmgw adds to a `tools/call`, against the same server called directly.

    .venv/bin/python bench/mcp_calls.py [--duration 10] [--warmup 2] [--direct-only] [--no-guard-row] [--keep]

The upstream: the `mcp` SDK's MCPServer (the dev extra's, 2.3) with one cheap tool, `echo`, over
streamable HTTP (stateful sessions, JSON answers, uvicorn without an access log), in a process of
its own. The client: this process, raw aiohttp POSTs of JSON-RPC over one session (initialize,
then `tools/call` on the session id), each answer parsed and checked; it reports its own CPU per
call so a reader sees whether it was the bottleneck.

Rows, each at concurrency 1 and 32 for `--duration` seconds after `--warmup` (2 s) of calls not
counted:

- direct: the upstream's own endpoint, tool `echo`;
- llmgw, 1 worker: `server init` as a user runs it, `server run --workers 1`, the upstream added
  with `llmgw ctl mcp add bench --url URL`, the client on `POST /mcp` with the admin key (which may
  call any tool) and the tool `bench__echo`;
- llmgw, default: the same install with `server run` as it starts by default (one worker per
  core);
- llmgw + guard (concurrency 1 only; `--no-guard-row` leaves it out): `server init --demo`, a
  policy judging the results of `bench/*` with the demo judge (fail closed), 1 worker.

Reported per row: calls/s, p50 and p99 (ms), the p50 added to direct's at the same concurrency,
CPU per call of the server under test (its process tree) and of the client, errors. The verdict
checks the issue's goal: at least 1,000 calls/s per worker through llmgw without a guard.
`--direct-only` measures the upstream alone (what a build without `/mcp` can run). Written to
bench/results/mcp_calls.md and .json (git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.server_process import LlmgwServer, free_port, wait_for  # noqa: E402

from bench import record  # noqa: E402
from llmgw.core.judges import DEMO_JUDGE  # noqa: E402

SERVER = "bench"  # the upstream's name in llmgw's catalog: clients see `bench__echo`
MESSAGE = "bench-hello"
PROTOCOL = "2025-06-18"
CONCURRENCIES = (1, 32)
WARMUP_S = 2.0
GOAL_CALLS_PER_S = 1000


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# --- the upstream ---------------------------------------------------------------------------


def serve_upstream(port: int) -> None:
    """Run the SDK's MCPServer with `echo` on 127.0.0.1:`port` until terminated."""
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench-upstream", log_level="WARNING")

    @server.tool()
    def echo(message: str) -> str:
        """Echo the message back."""
        return message

    app = server.streamable_http_app(json_response=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


@dataclass
class Upstream:
    dir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        out = open(self.dir / "upstream.log", "a")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "upstream", "--port", str(self.port)],
            stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        out.close()
        wait_for("the upstream MCP server", lambda: _answers(self.url), 30, every_s=0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        pass  # a GET without a session is refused: an answer all the same
    return True


# --- the client -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    tool: str
    key: str | None = None
    pid: int | None = None  # the server under test, for its CPU per call


class Session:
    """One MCP session over raw HTTP POSTs: the cheapest client that still speaks the protocol
    (initialize, the session id on every request, each answer parsed and checked)."""

    def __init__(self, http: aiohttp.ClientSession, target: Target) -> None:
        self.http, self.target = http, target
        self.headers = {"Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream"}
        if target.key:
            self.headers["Authorization"] = f"Bearer {target.key}"
        self.ids = itertools.count(1)
        # Each call's body is this prefix and its id: no JSON encoding per call.
        params = json.dumps({"name": target.tool, "arguments": {"message": MESSAGE}})
        self.prefix = f'{{"jsonrpc":"2.0","method":"tools/call","params":{params},"id":'

    async def open(self) -> None:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "llmgw-bench", "version": "1"}}}
        async with self.http.post(self.target.url, json=init, headers=self.headers) as resp:
            body = await resp.read()
            if resp.status != 200 or "Mcp-Session-Id" not in resp.headers:
                raise RuntimeError(f"{self.target.name}: initialize answered {resp.status}: "
                                   f"{body[:300]!r}")
            version = _message(body, resp.content_type, 0)["result"]["protocolVersion"]
            self.headers["Mcp-Session-Id"] = resp.headers["Mcp-Session-Id"]
            self.headers["MCP-Protocol-Version"] = version
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with self.http.post(self.target.url, json=note, headers=self.headers) as resp:
            await resp.read()
            if resp.status not in (200, 202):
                raise RuntimeError(f"{self.target.name}: initialized answered {resp.status}")

    async def call(self) -> None:
        """One `tools/call` of echo; raises unless its result carries the message."""
        request_id = next(self.ids)
        data = f"{self.prefix}{request_id}}}".encode()
        async with self.http.post(self.target.url, data=data, headers=self.headers) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"status {resp.status}")
            result = _message(body, resp.content_type, request_id).get("result") or {}
            texts = [str(c.get("text")) for c in result.get("content", [])]
            if result.get("isError") or not any(MESSAGE in text for text in texts):
                raise RuntimeError(f"unexpected answer {body[:300]!r}")

    async def close(self) -> None:
        async with self.http.delete(self.target.url, headers=self.headers) as resp:
            await resp.read()


def _message(body: bytes, content_type: str, request_id: int) -> dict[str, Any]:
    """The JSON-RPC answer to `request_id` in a JSON body or an SSE stream."""
    if content_type == "text/event-stream":
        for line in body.splitlines():
            if line.startswith(b"data:"):
                message = json.loads(line[5:])
                if message.get("id") == request_id:
                    return dict(message)
        raise RuntimeError(f"no answer to {request_id} in the stream {body[:300]!r}")
    message = json.loads(body)
    if message.get("id") != request_id:
        raise RuntimeError(f"answer to {message.get('id')!r}, not {request_id}")
    return dict(message)


def _tree_cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        root = psutil.Process(pid)
        total = 0.0
        for proc in [root, *root.children(recursive=True)]:
            times = proc.cpu_times()
            total += times.user + times.system
        return total
    except psutil.NoSuchProcess:
        return 0.0


async def _load(session: Session, concurrency: int, seconds: float) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        while (start := time.perf_counter()) < deadline:
            try:
                await session.call()
            except (RuntimeError, aiohttp.ClientError, ValueError):
                errors += 1
                continue
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, errors


async def measure(target: Target, concurrency: int, seconds: float,
                  warmup_s: float = WARMUP_S) -> dict[str, Any]:
    """Calls/s, latency percentiles and CPU per call of one row at one concurrency."""
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=60)) as http:
        session = Session(http, target)
        await session.open()
        await _load(session, concurrency, warmup_s)
        server_cpu, client_cpu = _tree_cpu_s(target.pid), time.process_time()
        started = time.perf_counter()
        latencies, errors = await _load(session, concurrency, seconds)
        elapsed = time.perf_counter() - started
        server_cpu, client_cpu = _tree_cpu_s(target.pid) - server_cpu, time.process_time() - client_cpu
        await session.close()
    calls = len(latencies)
    if calls < 2:
        raise RuntimeError(f"{target.name}: {calls} calls succeeded at concurrency {concurrency} "
                           f"({errors} errors)")
    cuts = statistics.quantiles(latencies, n=100)
    return {"row": target.name, "concurrency": concurrency, "calls": calls, "errors": errors,
            "calls_per_s": calls / elapsed, "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": cuts[98] * 1000,
            "server_cpu_us_per_call": server_cpu / calls * 1e6 if target.pid else None,
            "client_cpu_us_per_call": client_cpu / calls * 1e6}


# --- llmgw ----------------------------------------------------------------------------------


def add_upstream(server: LlmgwServer, upstream: Upstream) -> None:
    """The upstream in llmgw's catalog as `bench`, as a user adds a remote MCP server."""
    server.ctl("mcp", "add", SERVER, "--url", upstream.url)


def guard_results(server: LlmgwServer) -> None:
    """A policy judging the result of every `bench/*` call with the demo judge, fail closed; it
    covers no model."""
    policy = {"name": "bench-tool-results", "models": [], "tools": [f"{SERVER}/*"],
              "input": False, "output": True, "judges": [DEMO_JUDGE], "on_failure": "closed"}
    server.call("PUT", "/admin/v1/guard/policies/bench-tool-results", policy)


def measure_llmgw(name: str, server: LlmgwServer, concurrencies: tuple[int, ...],
                  args: argparse.Namespace) -> list[dict[str, Any]]:
    """One llmgw row: `bench__echo` on its `/mcp` with the admin key, the server's CPU counted
    over its process tree (its workers)."""
    assert server.proc is not None
    target = Target(name, server.url + "/mcp", f"{SERVER}__echo", server.admin_key,
                    server.proc.pid)
    cells = []
    for c in concurrencies:
        log(f"{name}, concurrency {c}")
        cells.append(asyncio.run(measure(target, c, args.duration, args.warmup)))
    return cells


def run_rows(root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    upstream = Upstream(root)
    upstream.start()
    quiet = ("--log-level", "warning")
    try:
        assert upstream.proc is not None
        direct = Target("direct", upstream.url, "echo", pid=upstream.proc.pid)
        results = []
        for c in CONCURRENCIES:
            log(f"direct, concurrency {c}")
            results.append(asyncio.run(measure(direct, c, args.duration, args.warmup)))
        if args.direct_only:
            return results
        # One install as `server init` makes it (its default guard policy covers no tool), run
        # with one worker, then as `server run` starts by default.
        server = LlmgwServer.init(root / "plain")
        server.start("--workers", "1", *quiet)
        try:
            add_upstream(server, upstream)
            results += measure_llmgw("llmgw, 1 worker", server, CONCURRENCIES, args)
        finally:
            server.stop()
        server.start(*quiet)
        try:
            results += measure_llmgw("llmgw, default", server, CONCURRENCIES, args)
        finally:
            server.stop()
        if not args.no_guard_row:
            guarded = LlmgwServer.init(root / "guarded", "--demo")
            guarded.start("--workers", "1", *quiet)
            try:
                log(f"waiting for the demo judge ({DEMO_JUDGE})")
                guarded.wait_ready(DEMO_JUDGE, timeout_s=600)
                add_upstream(guarded, upstream)
                guard_results(guarded)
                results += measure_llmgw("llmgw + guard", guarded, (1,), args)
            finally:
                guarded.stop()
        return results
    finally:
        upstream.stop()


# --- the report -----------------------------------------------------------------------------


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    direct = {r["concurrency"]: r["p50_ms"] for r in results if r["row"] == "direct"}
    lines = [f"# MCP tools/call, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"{len(os.sched_getaffinity(0))} cores; upstream: the mcp SDK's MCPServer (echo, "
             f"JSON answers); {args.duration:g} s per cell.", "",
             "| row | conc | calls/s | p50 ms | p99 ms | added p50 ms | server CPU µs/call "
             "| client CPU µs/call | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        added = r["p50_ms"] - direct[r["concurrency"]]
        server_cpu = r["server_cpu_us_per_call"]
        lines.append(
            f"| {r['row']} | {r['concurrency']} | {r['calls_per_s']:,.0f} | {r['p50_ms']:.2f} "
            f"| {r['p99_ms']:.2f} | {'' if r['row'] == 'direct' else f'{added:+.2f}'} "
            f"| {'' if server_cpu is None else f'{server_cpu:,.0f}'} "
            f"| {r['client_cpu_us_per_call']:,.0f} | {r['errors']} |")
    at_32 = {r["row"]: r["calls_per_s"] for r in results if r["concurrency"] == 32}
    if "llmgw, 1 worker" in at_32:
        one = at_32["llmgw, 1 worker"]
        verdict = "PASS" if one >= GOAL_CALLS_PER_S else "FAIL"
        lines += ["", f"{verdict}: llmgw, 1 worker, serves {one:,.0f} calls/s at concurrency 32 "
                      f"(goal: at least {GOAL_CALLS_PER_S:,} per worker without a guard; the "
                      f"upstream alone serves {at_32['direct']:,.0f})."]
    return "\n".join(lines) + "\n"


def main() -> None:
    if sys.argv[1:2] == ["upstream"]:
        parser = argparse.ArgumentParser()
        parser.add_argument("upstream")
        parser.add_argument("--port", type=int, required=True)
        serve_upstream(parser.parse_args().port)
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per cell")
    parser.add_argument("--warmup", type=float, default=WARMUP_S,
                        help="seconds of calls before each cell, not counted")
    parser.add_argument("--direct-only", action="store_true",
                        help="measure the upstream alone (a build without /mcp)")
    parser.add_argument("--no-guard-row", action="store_true",
                        help="leave out the guarded row (it needs the demo model and its judge)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the logs")
    args = parser.parse_args()
    load_before, code = round(os.getloadavg()[0], 2), record.commit()
    tmp = Path(tempfile.mkdtemp(prefix="llmgw-mcp-bench-"))
    try:
        results = run_rows(tmp, args)
        text = report(results, args)
        print(text)
        out = ROOT / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / "mcp_calls.md").write_text(text)
        meta = record.meta(load_before, code, command=" ".join(["bench/mcp_calls.py", *sys.argv[1:]]),
                           settings=vars(args))
        record.write(out / "mcp_calls.json", "mcp_calls", meta, {"cells": results})
        log("written bench/results/mcp_calls.md and bench/results/mcp_calls.json")
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
