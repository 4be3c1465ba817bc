"""Prefix-aware routing against least outstanding, on an agent's workload, side by side.

    .venv/bin/python bench/prefix_routing.py [--conversations 8] [--turns 6] [--concurrency 4]
                                             [--keep]

One install as a user gets it (`server init --no-guard`, `server run` with its embedded node,
SQLite), run twice: `prefix_routing = false` (least outstanding, as before) and `true` (the
default), each from a fresh start (cold engines). The demo GGUF (Gemma 3 270M Q4_K_M) served by 2
replicas of one core each; `--swa-full` so llama-server can reuse a prefix longer than Gemma's
sliding window, llama.cpp's own host prompt cache (`--cache-ram` left at its default), `--metrics`
for its counters.

The workload: `--conversations` agents, each with its own system prompt of about 1,500 tokens,
`--turns` turns whose history grows, interleaved at `--concurrency` (every turn of every
conversation waits for a free place; a conversation's next turn follows its answer). Each answer
is exactly 16 tokens (`ignore_eos`), so the tokens a replica predicted count its requests.

Reported per mode: time to first token p50/p95 (all turns, and turns after the first), the
prompt tokens the engines evaluated (their `llamacpp:prompt_tokens_total`, and the sum of each
answer's `timings.prompt_n`), the share of requests each replica served, the total time.
Written to bench/results/prefix_routing.md and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ondemand import Install, log  # noqa: E402
from tests.support.server_process import wait_for  # noqa: E402

from bench import record  # noqa: E402

MODEL = "bench-prefix"
ANSWER_TOKENS = 16
ARGS = ("--ctx-size 8192 --parallel 2 --swa-full --metrics --no-jinja --chat-template gemma")
MODES = {"least outstanding": "false", "prefix-aware": "true"}
_WORDS = ("agent tool file search patch test build review branch commit plan step rule output "
          "input error retry budget limit cache token model prompt answer check verify report "
          "schema field value queue stream batch route replica node server client request").split()


def system_prompt(n: int) -> str:
    """Conversation `n`'s own system prompt: about 1,500 tokens of the demo model's."""
    rng = random.Random(n)
    rules = [f"Rule {i}: " + " ".join(rng.choice(_WORDS) for _ in range(14)) + "."
             for i in range(70)]
    return f"You are coding agent number {n}. Follow every rule below.\n" + "\n".join(rules)


@dataclass
class Turn:
    conversation: int
    turn: int
    ttft_s: float
    prompt_n: int | None  # what the engine evaluated for it (its `timings`), when it said


@dataclass
class Phase:
    mode: str
    turns: list[Turn] = field(default_factory=list)
    evaluated: dict[str, float] = field(default_factory=dict)  # replica -> prompt tokens
    served: dict[str, float] = field(default_factory=dict)  # replica -> requests
    total_s: float = 0.0


async def ask(client: aiohttp.ClientSession, url: str,
              messages: list[dict[str, str]]) -> tuple[float, str, int | None]:
    """One streamed turn: its time to first token, its answer, and the engine's `prompt_n`."""
    body = {"model": MODEL, "messages": messages, "max_tokens": ANSWER_TOKENS, "temperature": 0,
            "stream": True, "ignore_eos": True}
    sent = time.monotonic()
    first: float | None = None
    text: list[str] = []
    prompt_n: int | None = None
    async with client.post(url + "/v1/chat/completions", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.read())[:300]!r}")
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    first = first or time.monotonic()
                    text.append(piece)
            timings = chunk.get("timings")
            if isinstance(timings, dict) and "prompt_n" in timings:
                prompt_n = int(timings["prompt_n"])
    if first is None:
        raise RuntimeError("the stream carried no content")
    return first - sent, "".join(text), prompt_n


async def workload(url: str, key: str, conversations: int, turns: int, concurrency: int) -> list[Turn]:
    """Every conversation's turns, interleaved at `concurrency`."""
    places = asyncio.Semaphore(concurrency)
    done: list[Turn] = []
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"},
                                     timeout=aiohttp.ClientTimeout(total=600)) as client:

        async def conversation(n: int) -> None:
            messages = [{"role": "system", "content": system_prompt(n)}]
            for t in range(turns):
                messages.append({"role": "user",
                                 "content": f"Step {t + 1}: what do you do next with file {n}-{t}?"})
                async with places:
                    ttft, answer, prompt_n = await ask(client, url, messages)
                messages.append({"role": "assistant", "content": answer})
                done.append(Turn(n, t, ttft, prompt_n))
                log(f"conversation {n} turn {t + 1}: first token {ttft:.2f} s, "
                    f"evaluated {prompt_n} prompt tokens")

        await asyncio.gather(*(conversation(n) for n in range(conversations)))
    return done


_METRIC = re.compile(r"^(llamacpp:[a-z_]+)(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.M)


def engine_counters(endpoint: str, key: str | None) -> dict[str, float]:
    """A replica's llama.cpp counters (`/metrics`, which `--metrics` turns on)."""
    base = endpoint.removesuffix("/v1").removesuffix("/")
    req = urllib.request.Request(base + "/metrics",
                                 headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(req, timeout=30) as resp:
        text = resp.read().decode()
    return {name: float(value) for name, value in _METRIC.findall(text)}


def engine_key(pid: int) -> str | None:
    """The key the replica's engine takes (its environment, as the node started it)."""
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        name, _, value = item.partition(b"=")
        if name == b"LLAMA_API_KEY":
            return value.decode()
    return None


def run_phase(root: Path, mode: str, args: argparse.Namespace) -> Phase:
    install = Install(root / mode.replace(" ", "-"), {"prefix_routing": MODES[mode]})
    phase = Phase(mode)
    try:
        install.start()
        install.server.ctl("model", "add", MODEL, "--path", str(install.gguf), "--cores", "1",
                           "--memory-gb", "1", "--args", ARGS, "--min", "2", "--max", "2")
        ready = wait_for("2 ready replicas", lambda: (lambda rs: rs if len(rs) == 2 else None)(
            [r for r in install.live(MODEL) if r["state"] == "ready"]), 300, every_s=1)
        replicas = {r["id"]: (r["endpoint"], engine_key(int(r["pid"]))) for r in ready}
        before = {rid: engine_counters(*where) for rid, where in replicas.items()}
        log(f"{mode}: 2 replicas ready; {args.conversations} conversations of {args.turns} turns")
        started = time.monotonic()
        phase.turns = asyncio.run(workload(install.server.url, install.server.admin_key,
                                           args.conversations, args.turns, args.concurrency))
        phase.total_s = time.monotonic() - started
        for rid, where in replicas.items():
            after = engine_counters(*where)
            phase.evaluated[rid] = after["llamacpp:prompt_tokens_total"] - \
                before[rid]["llamacpp:prompt_tokens_total"]
            phase.served[rid] = (after["llamacpp:tokens_predicted_total"]
                                 - before[rid]["llamacpp:tokens_predicted_total"]) / ANSWER_TOKENS
        return phase
    except BaseException:
        log("last lines of the server's log:\n" + "\n".join(install.server.log().splitlines()[-30:]))
        raise
    finally:
        install.stop()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def figures(phase: Phase) -> dict[str, Any]:
    ttft = [t.ttft_s for t in phase.turns]
    later = [t.ttft_s for t in phase.turns if t.turn > 0]
    total = sum(phase.served.values()) or 1
    return {
        "requests": len(phase.turns),
        "ttft_p50_s": round(statistics.median(ttft), 3),
        "ttft_p95_s": round(pct(ttft, 0.95), 3),
        "later_turns_ttft_p50_s": round(statistics.median(later), 3) if later else None,
        "prompt_tokens_evaluated": int(sum(phase.evaluated.values())),
        "prompt_n_sum": sum(t.prompt_n or 0 for t in phase.turns),
        "share": {rid: round(n / total, 3) for rid, n in sorted(phase.served.items())},
        "total_s": round(phase.total_s, 1),
        "samples": [[t.conversation, t.turn, round(t.ttft_s, 4), t.prompt_n] for t in phase.turns],
    }


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    lo, pa = results["least outstanding"], results["prefix-aware"]
    lines = [
        "# Prefix-aware routing (bench/prefix_routing.py)", "",
        f"{args.conversations} conversations × {args.turns} turns at concurrency "
        f"{args.concurrency}, 2 replicas of the demo model (1 core each), {ANSWER_TOKENS}-token "
        f"answers; engine args `{ARGS}`; load average before {os.getloadavg()[0]:.2f}.", "",
        "| | least outstanding | prefix-aware | ratio |", "| --- | --- | --- | --- |",
    ]

    def row(name: str, key: str, fmt: str = "{:.2f}") -> None:
        a, b = lo[key], pa[key]
        ratio = f"{a / b:.2f}× lower" if a and b else "–"
        lines.append(f"| {name} | {fmt.format(a)} | {fmt.format(b)} | {ratio} |")

    row("TTFT p50 (s)", "ttft_p50_s")
    row("TTFT p95 (s)", "ttft_p95_s")
    row("TTFT p50, turns 2+ (s)", "later_turns_ttft_p50_s")
    row("prompt tokens evaluated (engines' counters)", "prompt_tokens_evaluated", "{:,}")
    row("prompt tokens evaluated (sum of timings.prompt_n)", "prompt_n_sum", "{:,}")
    row("total time (s)", "total_s", "{:.1f}")
    lines.append("| share of requests per replica | "
                 + " / ".join(f"{v:.0%}" for v in lo["share"].values()) + " | "
                 + " / ".join(f"{v:.0%}" for v in pa["share"].values()) + " | |")
    saved = 1 - pa["prompt_tokens_evaluated"] / max(lo["prompt_tokens_evaluated"], 1)
    lines += ["", f"Prompt tokens evaluated: {saved:.0%} fewer with prefix-aware routing."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the logs")
    args = parser.parse_args()
    load_before, code = round(os.getloadavg()[0], 2), record.commit()
    tmp = Path(tempfile.mkdtemp(prefix="llmgw-prefix-bench-"))
    try:
        results = {mode: figures(run_phase(tmp, mode, args)) for mode in MODES}
        text = report(results, args)
        print(text)
        out = ROOT / "bench" / "results"
        out.mkdir(exist_ok=True)
        (out / "prefix_routing.md").write_text(text)
        meta = record.meta(load_before, code, command=" ".join(["bench/prefix_routing.py",
                                                               *sys.argv[1:]]),
                           settings=vars(args) | {"args": ARGS})
        record.write(out / "prefix_routing.json", "prefix_routing", meta, results)
        log("written bench/results/prefix_routing.md and bench/results/prefix_routing.json")
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
