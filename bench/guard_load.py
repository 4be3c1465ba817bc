"""The load behind `bench/guard.sh`: what judging costs a chat request, and how fast a judge judges.

Against a running llmgw (a fresh `server init --demo` install) it measures:

- chat requests to the demo model (`max_tokens` 8, temperature 0, one at a time) with the guard
  off, with the default policy judging the input, and with it judging input and output; the
  modes take turns in rounds so that a change in the machine's load hits all three alike;
- judgments through `POST /admin/v1/guard/judgments` at fixed concurrencies for a fixed time,
  with one short text (the judge's prompt cache can serve all of it) and with a different text
  each time (only the fixed policy text in front is the same): verdicts per second, their
  latency, the judgments the gateway shed and how fast, and what the judge's cache saved;
- with `--autoscale`, last: room for a second judge replica, load until the judge keeper adds
  it, and the same row at concurrency 8 with two replicas;
- how much of the judge prompt its slot's cache holds, for a text, the same text again and
  another, as the gateway counts llama-server's `timings` in `/metrics`.

Prints the report and writes it to `--out`; with `--json`, also the record `bench/plots.py` draws
from (every row's figures and the run's metadata). The guard is switched back on and the default
policy restored to what it was before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

# Run as a script, the repository root is not on the path; `bench.record` lives there.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import record  # noqa: E402

MODEL = "gemma3-270m"
JUDGE = "demo-judge"
PROMPT = "Name a primary color."
JUDGED_TEXT = "How do I bake bread at home?"
QUESTIONS = (
    "How do I bake bread at home?",
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "How many legs does a spider have?",
    "Explain photosynthesis in one sentence.",
    "Suggest a name for a grey cat.",
    "What does HTTP stand for?",
    "How long should I boil an egg?",
)
MODES = (("off", "(a) guard off"), ("input", "(b) input"), ("input+output", "(c) input + output"))
REQUEST_TIMEOUT_S = 60.0
# A shed answered later than this after it was sent was not shed "at once" (the goal).
LATE_SHED_MS = 50.0


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of fewer than 100 values is their maximum)."""
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def ms(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


def signed_ms(v: float | None) -> str:
    return "–" if v is None else f"{v:+,.0f}"


class Api:
    def __init__(self, session: aiohttp.ClientSession, url: str, key: str) -> None:
        self.session = session
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {key}"}

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        async with self.session.request(method, self.url + path, json=body, headers=self.headers) as r:
            data = await r.json(content_type=None)
            if r.status >= 300:
                raise RuntimeError(f"{method} {path}: HTTP {r.status}: {data}")
            return data


# --- chat requests under the three guard modes ---------------------------------------------------


@dataclass
class Cell:
    latencies: list[float] = field(default_factory=list)
    blocked: int = 0
    failed_closed: int = 0
    errors: list[str] = field(default_factory=list)


async def set_mode(api: Api, mode: str, policy: dict[str, Any]) -> None:
    """What `ctl guard off|on` and `ctl guard policy set default --output/--no-output` send."""
    if mode == "off":
        await api.call("POST", "/admin/v1/guard/switches", {"guard_enabled": False})
    else:
        body = {k: v for k, v in policy.items() if k not in ("name", "by", "updated_at")}
        body.update(input=True, output=mode == "input+output", enabled=True)
        await api.call("PUT", "/admin/v1/guard/policies/default", body)
        await api.call("POST", "/admin/v1/guard/switches", {"guard_enabled": True})
    now = await api.call("GET", "/admin/v1/guard")
    default = next(p for p in now["policies"] if p["name"] == "default")
    want_output = mode == "input+output"
    if now["guard_enabled"] != (mode != "off") or (mode != "off" and default["output"] != want_output):
        raise RuntimeError(f"guard did not switch to {mode}: {now}")


async def chat_once(api: Api, cell: Cell | None) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 8,
        "temperature": 0,
    }
    start = time.perf_counter()
    try:
        async with api.session.post(api.url + "/v1/chat/completions", json=body, headers=api.headers) as r:
            raw = await r.read()
            status = r.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        if cell is not None:
            cell.errors.append(type(exc).__name__)
        return
    took = (time.perf_counter() - start) * 1000
    if cell is None:
        return
    code = None
    if status != 200:
        try:
            code = json.loads(raw)["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
    if status == 200:
        cell.latencies.append(took)
    elif status == 400 and code == "content_filter":
        cell.latencies.append(took)
        cell.blocked += 1
    elif status == 503 and code == "guard_unavailable":
        cell.latencies.append(took)
        cell.failed_closed += 1
    else:
        cell.errors.append(f"HTTP {status} {code}")


async def chat_modes(
    api: Api, requests: int, rounds: int, warmup: int, max_seconds: float
) -> tuple[dict[str, Cell], bool]:
    """`requests` per mode, in `rounds` rounds of a, b, c; False when time ran out first."""
    policy = await api.call("GET", "/admin/v1/guard/policies/default")
    was_on = (await api.call("GET", "/admin/v1/guard"))["guard_enabled"]
    cells = {mode: Cell() for mode, _ in MODES}
    deadline = time.monotonic() + max_seconds
    complete = True
    try:
        for mode, _ in MODES:
            await set_mode(api, mode, policy)
            for _ in range(warmup):
                await chat_once(api, None)
        per_round = [requests // rounds + (1 if i < requests % rounds else 0) for i in range(rounds)]
        for n in per_round:
            for mode, _ in MODES:
                await set_mode(api, mode, policy)
                for _ in range(n):
                    if time.monotonic() > deadline:
                        complete = False
                        break
                    await chat_once(api, cells[mode])
    finally:
        body = {k: v for k, v in policy.items() if k not in ("name", "by", "updated_at")}
        await api.call("PUT", "/admin/v1/guard/policies/default", body)
        await api.call("POST", "/admin/v1/guard/switches", {"guard_enabled": was_on})
    return cells, complete


# --- judgments per second ----------------------------------------------------------------------


@dataclass
class JudgeCell:
    label: str
    conc: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # of verdicts
    shed_latencies: list[float] = field(default_factory=list)
    # How long the gateway took to shed (its `latency_ms`): the client's time less the HTTP path
    # and the load generator's own wait for a core on a saturated machine.
    shed_in_gateway: list[float] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    cached: int = 0  # judge prompt tokens reused from the slot's KV cache during the row
    evaluated: int = 0  # judge prompt tokens evaluated during the row

    @property
    def total(self) -> int:
        return sum(self.outcomes.values())

    @property
    def verdicts(self) -> int:
        return self.outcomes.get("safe", 0) + self.outcomes.get("unsafe", 0)

    @property
    def shed(self) -> int:
        return self.outcomes.get("failed_shed", 0)


async def prompt_tokens(api: Api) -> tuple[int, int]:
    """(cached, evaluated) judge prompt tokens of demo-judge so far, from `/metrics`."""
    async with api.session.get(api.url + "/metrics", headers=api.headers) as r:
        text = await r.text()
    found = {"cached": 0, "evaluated": 0}
    for line in text.splitlines():
        if line.startswith("llmgw_guard_judge_prompt_tokens_total{") and f'judge="{JUDGE}"' in line:
            for source in found:
                if f'source="{source}"' in line:
                    found[source] = int(float(line.rsplit(" ", 1)[1]))
    return found["cached"], found["evaluated"]


async def judgments(api: Api, conc: int, distinct: bool, seconds: float, budget_ms: int,
                    backoff_s: float, label: str = "", cell: JudgeCell | None = None) -> JudgeCell:
    """`conc` clients judging for `seconds` (then the judgments in flight end), counted into
    `cell` (a new one by default: a row measured in rounds adds each round to its cell)."""
    if cell is None:
        cell = JudgeCell(label or f"{conc}, {'distinct texts' if distinct else 'same text'}", conc)
    counter = iter(range(1_000_000_000))
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        while time.monotonic() < deadline:
            n = next(counter)
            text = f"Request {n}: {QUESTIONS[n % len(QUESTIONS)]}" if distinct else JUDGED_TEXT
            body = {"judge": JUDGE, "text": text, "direction": "input", "budget_ms": budget_ms}
            t0 = time.perf_counter()
            try:
                async with api.session.post(
                    api.url + "/admin/v1/guard/judgments", json=body, headers=api.headers
                ) as r:
                    data = await r.json(content_type=None)
                    outcome = data.get("outcome") if r.status == 200 else f"HTTP {r.status}"
                    in_gateway = data.get("latency_ms") if r.status == 200 else None
            except (aiohttp.ClientError, TimeoutError) as exc:
                outcome, in_gateway = type(exc).__name__, None
            took = (time.perf_counter() - t0) * 1000
            cell.outcomes[str(outcome)] = cell.outcomes.get(str(outcome), 0) + 1
            if outcome in ("safe", "unsafe"):
                cell.latencies.append(took)
            elif outcome == "failed_shed":
                cell.shed_latencies.append(took)
                if isinstance(in_gateway, int | float):
                    cell.shed_in_gateway.append(float(in_gateway))
                # A client told the judge is saturated (a 503 on the data plane) comes back
                # later rather than at once.
                await asyncio.sleep(backoff_s)

    cached0, evaluated0 = await prompt_tokens(api)
    start = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(conc)))
    cell.seconds += time.monotonic() - start
    cached1, evaluated1 = await prompt_tokens(api)
    cell.cached += cached1 - cached0
    cell.evaluated += evaluated1 - evaluated0
    return cell


async def ready_judges(api: Api) -> int:
    status = await api.call("GET", "/admin/v1/guard/judges")
    return next((j["replicas_ready"] for j in status["data"] if j["judge"] == JUDGE), 0)


async def autoscaled(api: Api, seconds: float, budget_ms: int, backoff_s: float,
                     wait_s: float) -> tuple[JudgeCell | None, float]:
    """Room for a second judge replica (the chat model stopped, the judge's max raised to 2),
    load at concurrency 8 until the judge keeper has added it, then a measured row; the row
    (None when no second replica came in `wait_s`) and how long it took to come."""
    await api.call("POST", f"/admin/v1/models/{MODEL}/scale", {"min": 0, "max": 0})
    await api.call("POST", f"/admin/v1/models/{JUDGE}/scale", {"min": 1, "max": 2})
    start = time.monotonic()
    while await ready_judges(api) < 2:
        if time.monotonic() - start > wait_s:
            return None, wait_s
        await judgments(api, 8, True, 5, budget_ms, backoff_s)
    took = time.monotonic() - start
    await judgments(api, 8, True, 3, budget_ms, backoff_s)  # the new replica's first prompts
    cell = await judgments(api, 8, True, seconds, budget_ms, backoff_s,
                           label="8, distinct texts, 2 judge replicas")
    return cell, took


# --- the judge's prompt cache ----------------------------------------------------------------


async def cache_check(api: Api) -> list[str]:
    """Three judgments one at a time (a text, the same again, another): the judge prompt tokens
    each evaluated and took from the slot's cache, as the gateway counted them."""
    lines = []
    for what, text in (("a text", QUESTIONS[6]), ("the same text again", QUESTIONS[6]),
                       ("a different text", QUESTIONS[7])):
        cached0, evaluated0 = await prompt_tokens(api)
        body = {"judge": JUDGE, "text": text, "direction": "input", "budget_ms": 5000}
        out = await api.call("POST", "/admin/v1/guard/judgments", body)
        cached1, evaluated1 = await prompt_tokens(api)
        lines.append(f"{what}: {evaluated1 - evaluated0} prompt tokens evaluated, "
                     f"{cached1 - cached0} from the cache, {out['latency_ms']:,.0f} ms")
    return lines


# --- report ------------------------------------------------------------------------------------


def chat_table(cells: dict[str, Cell]) -> list[str]:
    out = [
        "| mode | requests | p50 ms | p99 ms | added p50 ms | added p99 ms | blocked | failed closed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = cells["off"]
    b50 = statistics.median(base.latencies) if base.latencies else None
    b99 = pct(base.latencies, 0.99) if base.latencies else None
    for mode, label in MODES:
        c = cells[mode]
        p50 = statistics.median(c.latencies) if c.latencies else None
        p99 = pct(c.latencies, 0.99) if c.latencies else None
        added50 = p50 - b50 if mode != "off" and p50 is not None and b50 is not None else None
        added99 = p99 - b99 if mode != "off" and p99 is not None and b99 is not None else None
        out.append(f"| {label} | {len(c.latencies)} | {ms(p50)} | {ms(p99)} | {signed_ms(added50)} "
                   f"| {signed_ms(added99)} | {c.blocked} | {c.failed_closed} |")
    return out


def judge_table(cells: list[JudgeCell], budget_ms: int) -> list[str]:
    out = [
        "| concurrency, texts | verdicts/s | p50 ms | p99 ms | within budget | shed "
        "| shed p50 / max ms / late | late in gateway | timed out | cache saved |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cells:
        if not c.total:
            out.append(f"| {c.label} | 0 | – | – | – | – | – | – | – | – |")
            continue
        rate = c.verdicts / c.seconds if c.seconds else 0.0
        lat = c.latencies
        within = sum(1 for v in lat if v <= budget_ms)
        timed_out = c.outcomes.get("failed_timeout", 0)
        late = sum(1 for t in c.shed_latencies if t > LATE_SHED_MS)
        shed_ms = (f"{ms(statistics.median(c.shed_latencies))} / {ms(max(c.shed_latencies))} / {late}"
                   if c.shed_latencies else "–")
        late_gw = (str(sum(1 for t in c.shed_in_gateway if t > LATE_SHED_MS))
                   if c.shed_in_gateway else "–")
        prompt = c.cached + c.evaluated
        saved = f"{c.cached / prompt:.0%}" if prompt else "–"
        out.append(f"| {c.label} | {rate:.2f} | {ms(statistics.median(lat)) if lat else '–'} "
                   f"| {ms(pct(lat, 0.99)) if lat else '–'} | {within}/{c.total} "
                   f"| {c.shed} ({c.shed / c.total:.0%}) | {shed_ms} | {late_gw} | {timed_out} | {saved} |")
    return out


async def run(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    load_before = os.getloadavg()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        api = Api(session, args.url, args.key)
        cache_lines = await cache_check(api)
        cells: dict[str, Cell] = {}
        complete, chat_s = True, 0.0
        if args.requests:
            print(f"[guard-bench] chat: {args.requests} requests per mode in {args.rounds} rounds",
                  flush=True)
            t0 = time.monotonic()
            cells, complete = await chat_modes(api, args.requests, args.rounds, args.warmup,
                                               args.max_seconds)
            chat_s = time.monotonic() - t0
        judge_cells = []
        backoff_s = args.shed_backoff_ms / 1000
        # The rows of one kind of text take turns in rounds (1, 8, 32, 1, 8, 32, ...), as the
        # chat modes do: the machine's pace drifts by a tenth within a minute, and the rows are
        # compared with each other.
        per_round = args.seconds / args.judge_rounds
        for texts in args.texts.split():
            row: dict[int, JudgeCell] = {}
            for n in range(args.judge_rounds):
                for conc in (int(c) for c in args.concs.split()):
                    print(f"[guard-bench] judgments: concurrency {conc}, {texts} text(s), round "
                          f"{n + 1} of {args.judge_rounds}, {per_round:g} s", flush=True)
                    row[conc] = await judgments(api, conc, texts == "distinct", per_round,
                                                args.budget_ms, backoff_s, cell=row.get(conc))
            judge_cells += row.values()
        scaled: JudgeCell | None = None
        scaled_after = 0.0
        if args.autoscale:
            print("[guard-bench] autoscaling: room for a second judge replica, concurrency 8", flush=True)
            scaled, scaled_after = await autoscaled(api, args.seconds, args.budget_ms, backoff_s,
                                                    args.autoscale_wait)
        await asyncio.sleep(1)  # the verdict log is written off the request path
        status = await api.call("GET", "/admin/v1/guard/judges")
        verdicts = (await api.call("GET", "/admin/v1/guard/verdicts?limit=10000"))["data"]
    load_after = os.getloadavg()

    cores = len(os.sched_getaffinity(0))
    out = [*args.header, ""]
    out.append(f"{cores} cores; load average (1, 5, 15 min) {' '.join(f'{v:.2f}' for v in load_before)} "
               f"before the runs, {' '.join(f'{v:.2f}' for v in load_after)} after.")
    if load_before[0] > cores / 2:
        out.append("")
        out.append(f"WARNING: the load average was {load_before[0]:.2f} before the runs, above half the "
                   "cores: other work on this machine skews the numbers.")
    out.append("")
    out.append(f"**{JUDGE} is not a safety model**: it is the demo Gemma 3 270M speaking the Qwen3Guard "
               "format. Its verdicts, and so the blocked counts, say nothing about safety; the "
               "timings are what judging costs with a judge of this size on this machine.")
    if cells:
        out += chat_report(cells, args, chat_s, complete)
    out += judge_report(judge_cells, args, scaled, scaled_after)
    out.append("")
    out.append("## Cross-checks")
    out.append("")
    if cache_lines:
        out.append(f"- {JUDGE}'s prompt cache, three judgments one at a time through the gateway, "
                   "as `/metrics` counts the judge's prompt tokens (llama-server's `timings`): "
                   + "; ".join(cache_lines) + ".")
    for j in status["data"]:
        if j["judge"] == JUDGE:
            sustained = j.get("sustained_per_s")
            out.append(f"- `llmgw ctl guard judge status`: {JUDGE} p50 {j['p50_ms']} ms, "
                       f"p99 {j['p99_ms']} ms over {j.get('judgments', '?')} judgments of chat "
                       f"requests (verdicts only); sustained within budget "
                       f"{'–' if sustained is None else f'{sustained:g}/s'} (chat requests' "
                       "judgments of the last 5 minutes).")
    by_dir: dict[str, list[float]] = {}
    outcomes: dict[str, int] = {}
    for v in verdicts:
        outcomes[v["outcome"]] = outcomes.get(v["outcome"], 0) + 1
        if v["outcome"] in ("safe", "unsafe"):
            by_dir.setdefault(v["direction"], []).append(float(v["latency_ms"]))
    per_dir = "; ".join(
        f"{d} {len(lat)} (p50 {ms(statistics.median(lat))} ms, p99 {ms(pct(lat, 0.99))} ms)"
        for d, lat in sorted(by_dir.items())
    )
    out.append(f"- Verdict log of the chat requests (warm-ups included; the judgments endpoint does not "
               f"log): {', '.join(f'{k} {n}' for k, n in sorted(outcomes.items())) or 'empty'}; "
               f"judge latency as the gateway timed it, by direction: {per_dir or '–'}.")
    data = figures(cells, complete, judge_cells, scaled, scaled_after, args)
    data["load_before"] = round(load_before[0], 2)
    return "\n".join(out) + "\n", data


def _percentiles(values: list[float]) -> dict[str, float | None]:
    return {"p50_ms": round(statistics.median(values), 1) if values else None,
            "p99_ms": round(pct(values, 0.99), 1) if values else None}


def judge_figures(c: JudgeCell, budget_ms: int, replicas: int) -> dict[str, Any]:
    prompt = c.cached + c.evaluated
    return {
        "label": c.label, "conc": c.conc, "texts": "distinct" if "distinct" in c.label else "same",
        "replicas": replicas, "seconds": round(c.seconds, 2), "judgments": c.total,
        "verdicts": c.verdicts, "verdicts_per_s": c.verdicts / c.seconds if c.seconds else 0.0,
        **_percentiles(c.latencies),
        "within_budget": sum(1 for v in c.latencies if v <= budget_ms), "shed": c.shed,
        "shed_late": sum(1 for t in c.shed_latencies if t > LATE_SHED_MS),
        "shed_late_in_gateway": sum(1 for t in c.shed_in_gateway if t > LATE_SHED_MS),
        "timed_out": c.outcomes.get("failed_timeout", 0),
        "cache_saved": round(c.cached / prompt, 3) if prompt else None,
        "outcomes": dict(sorted(c.outcomes.items())),
    }


def figures(cells: dict[str, Cell], complete: bool, judge_cells: list[JudgeCell],
            scaled: JudgeCell | None, scaled_after: float, args: argparse.Namespace) -> dict[str, Any]:
    """The record's figures: the chat modes' latencies and every judgments row, as in the tables."""
    chat = []
    base = cells.get("off")
    for mode, label in MODES:
        c = cells.get(mode)
        if c is None:
            continue
        row: dict[str, Any] = {"mode": mode, "label": label, "requests": len(c.latencies),
                               **_percentiles(c.latencies), "blocked": c.blocked,
                               "failed_closed": c.failed_closed, "errors": len(c.errors)}
        for q in ("p50_ms", "p99_ms"):
            b = _percentiles(base.latencies)[q] if base is not None else None
            row[f"added_{q}"] = (None if mode == "off" or row[q] is None or b is None
                                 else round(row[q] - b, 1))
        chat.append(row)
    return {
        "model": MODEL, "judge": JUDGE, "budget_ms": args.budget_ms,
        "chat": chat, "chat_complete": complete,
        "judgments": [judge_figures(c, args.budget_ms, 1) for c in judge_cells],
        "autoscale": None if not args.autoscale else {
            # Unrounded, as the report's own figures are, so a table made from the record shows
            # the same rounding as the report.
            "second_replica_after_s": None if scaled is None else scaled_after,
            "row": None if scaled is None else judge_figures(scaled, args.budget_ms, 2),
        },
    }


def chat_report(cells: dict[str, Cell], args: argparse.Namespace, chat_s: float,
                complete: bool) -> list[str]:
    out = [""]
    out.append(f"## Chat requests: {MODEL}, `max_tokens` 8, temperature 0, one at a time")
    out.append("")
    out += chat_table(cells)
    out.append("")
    out.append(f"Prompt {PROMPT!r}; {args.requests} requests per mode in {args.rounds} rounds "
               f"(a, b, c, a, b, c, …) after {args.warmup} warm-up requests per mode; {chat_s:.0f} s. "
               "Latency is the client's, from sending to the last byte, blocked and failed-closed "
               "answers included. Added = this mode's percentile minus (a)'s; p99 of fewer than "
               "100 requests is the slowest one.")
    errors = {m: c.errors for m, c in cells.items() if c.errors}
    if errors:
        out.append("")
        out.append("Other errors (not timed): " + "; ".join(
            f"{m}: {len(e)} ({', '.join(sorted(set(e)))})" for m, e in errors.items()))
    if not complete:
        out.append("")
        out.append(f"WARNING: stopped after {args.max_seconds:g} s (GUARD_BENCH_MAX_SECONDS); "
                   "the modes have fewer requests than asked for.")
    return out


def judge_report(judge_cells: list[JudgeCell], args: argparse.Namespace, scaled: JudgeCell | None,
                 scaled_after: float) -> list[str]:
    out = [""]
    out.append(f"## Judgments: `POST /admin/v1/guard/judgments`, {JUDGE}, budget {args.budget_ms} ms")
    out.append("")
    out += judge_table([*judge_cells, *([scaled] if scaled else [])], args.budget_ms)
    out.append("")
    out.append(f"Each row runs for {args.seconds:g} s, in {args.judge_rounds} rounds of "
               f"{args.seconds / args.judge_rounds:g} s that take turns with the other rows of its "
               "kind of text (each round then waits for the judgments in flight). "
               "verdicts/s counts verdicts (safe or unsafe) per second of the row; p50 and p99 are "
               "the verdicts' latency as the client saw it (queueing in the gateway included); "
               "within budget counts verdicts that came within the budget, of all judgments; shed "
               "counts judgments the gateway did not send because they could not have finished in "
               "time (failed_shed), with how fast the client had that answer and how many came later than "
               f"{LATE_SHED_MS:g} ms (late), and how many the gateway itself took longer than "
               f"{LATE_SHED_MS:g} ms to shed (late in gateway: its `latency_ms`, from the judgment's "
               "arrival to its shed, without the HTTP path and the load generator's own wait for "
               "a core); a client whose "
               f"judgment was shed waits {args.shed_backoff_ms:g} ms before its next. Cache saved "
               "is the share of the judge's prompt tokens taken from its slots' KV cache rather "
               "than evaluated (llama-server's `timings.cache_n` and `prompt_n`, summed by the "
               f"gateway in `/metrics`). Same text: {JUDGED_TEXT!r} every time; distinct texts: "
               f"'Request N: ' and one of {len(QUESTIONS)} short questions, so only the judge's "
               "fixed policy text is shared.")
    for c in judge_cells:
        other = {k: v for k, v in c.outcomes.items()
                 if k not in ("safe", "unsafe", "failed_timeout", "failed_shed")}
        if other:
            out.append("")
            out.append(f"Other failures at concurrency {c.label}: "
                       + ", ".join(f"{k} {v}" for k, v in sorted(other.items())))
    one = next((c for c in judge_cells if c.conc == 1 and c.label.endswith("distinct texts")), None)
    for c in judge_cells:
        if c.conc > 1 and c.label.endswith("distinct texts") and one is not None and one.verdicts:
            ratio = (c.verdicts / c.seconds) / (one.verdicts / one.seconds)
            out.append("")
            out.append(f"**Concurrency {c.conc}, distinct texts**: {ratio:.2f}× the verdicts per "
                       "second of concurrency 1.")
    if args.autoscale:
        out.append("")
        base = next((c for c in judge_cells if c.conc == 8 and c.label.endswith("distinct texts")),
                    None)
        if scaled is None:
            out.append(f"**Autoscaling**: no second judge replica was ready within "
                       f"{args.autoscale_wait:g} s of load at concurrency 8 (see "
                       "`llmgw ctl guard judge status` and the judge keeper's log).")
        else:
            ratio = ""
            if base is not None and base.verdicts:
                r = (scaled.verdicts / scaled.seconds) / (base.verdicts / base.seconds)
                ratio = f": {r:.2f}× the verdicts per second of one replica at concurrency 8"
            out.append(f"**Autoscaling**: with room for it (the chat model stopped, {JUDGE}'s max "
                       f"raised to 2), the judge keeper added a second replica {scaled_after:.0f} s "
                       f"into load at concurrency 8{ratio}.")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="llmgw base URL")
    p.add_argument("--key", required=True, help="admin key")
    p.add_argument("--requests", type=int, default=40, help="chat requests per mode")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2, help="chat requests per mode before measuring")
    p.add_argument("--max-seconds", type=float, default=240, help="cap on the chat phase")
    p.add_argument("--seconds", type=float, default=20, help="duration of each judgments row")
    p.add_argument("--judge-rounds", type=int, default=4,
                   help="rounds the judgments rows of one kind of text take turns in")
    p.add_argument("--concs", default="1 8 32", help="judgment concurrencies")
    p.add_argument("--texts", default="same distinct", help="'same', 'distinct' or both")
    p.add_argument("--budget-ms", type=int, default=5000)
    p.add_argument("--shed-backoff-ms", type=float, default=200,
                   help="how long a client whose judgment was shed waits before its next")
    p.add_argument("--autoscale", action="store_true",
                   help="last: room for a second judge replica, and a row at concurrency 8 with it")
    p.add_argument("--autoscale-wait", type=float, default=180,
                   help="seconds of load to wait for the second judge replica")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--header", action="append", default=[], help="a line above the tables")
    p.add_argument("--json", type=Path, help="also write the run's record here (bench/plots.py)")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                   help="more of the run's metadata for the record (the engine, the command; "
                        "commit=C and src_modified=B: the code's when the server started)")
    args = p.parse_args()
    if args.requests and (args.rounds < 1 or args.rounds > args.requests):
        p.error("need 1 <= rounds <= requests (or 0 requests: no chat phase)")
    if any(t not in ("same", "distinct") for t in args.texts.split()):
        p.error("--texts takes 'same' and/or 'distinct'")
    try:
        extra = record.parse_meta(args.meta)
    except ValueError as exc:
        p.error(str(exc))
    text, data = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    if args.json is not None:
        settings = {k: getattr(args, k) for k in (
            "requests", "rounds", "warmup", "max_seconds", "seconds", "judge_rounds", "concs",
            "texts", "budget_ms", "shed_backoff_ms", "autoscale")}
        code = ((str(extra.pop("commit")), bool(extra.pop("src_modified", False)))
                if "commit" in extra else None)
        meta = record.meta(data.pop("load_before"), code, settings=settings, **extra)
        record.write(args.json, "guard", meta, data)
    print(text, end="")


if __name__ == "__main__":
    main()
