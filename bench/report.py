"""Turn the run's result lines into the Markdown table and the goal verdicts.

Input: a file of whitespace-separated rows `api target mode conc rps p50_ms p99_ms errors cpu_us`,
as `bench/run.sh` writes them (cpu_us: the proxy's CPU per request, `-` for direct). Prints the
report and writes it to `--out`; with `--json`, also the record `bench/plots.py` draws from (every
cell's median and its rounds, the verdicts, and the run's metadata).
Exit status is 0 whatever the verdicts; the report says PASS or FAIL.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import median
from typing import Any, NamedTuple

# Run as a script, the repository root is not on the path; `bench.record` lives there.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import record  # noqa: E402

TARGETS = ("direct", "llmgw", "llmgw-redis", "passthrough", "litellm", "llmgw-2w", "llmgw-2w-redis",
           "passthrough-2p", "passthrough-raw", "proxy-nginx")
# What each target is called in the table: llmgw-2w is `server run --workers 2`, passthrough-2p
# the pass-through in 2 processes on one port (its floor), passthrough-raw the pass-through on a
# bare asyncio + httptools server with llmgw's upstream client (what the HTTP server costs),
# proxy-nginx nginx itself as a reverse proxy (what a proxy's hop costs on the machine now),
# litellm LiteLLM's proxy with 1 worker (BENCH_LITELLM=1: the product llmgw is compared with).
TARGET_LABELS = {"llmgw": "llmgw, 1 worker", "llmgw-2w": "llmgw, 2 workers",
                 "litellm": "LiteLLM proxy (the anchor)",
                 "llmgw-redis": "llmgw, 1 worker, limits in Redis",
                 "llmgw-2w-redis": "llmgw, 2 workers, limits in Redis",
                 "passthrough-2p": "passthrough, 2 processes",
                 "passthrough-raw": "raw floor (httptools server)",
                 "proxy-nginx": "nginx as a proxy"}
MODES = ("json", "stream")
# The client's API, and what it is called in the table. Chat completions is the yardstick the
# other dialects are held to.
APIS = {
    "chat": "chat completions",
    "messages": "messages",
    "messages_via_chat": "messages → chat",
    "responses_via_chat": "responses → chat",
    "route": "chat → route",  # a two-target priority route; its first target answers
    # BENCH_CACHE=1: the response cache on; every request a hit, or every one a miss it keeps.
    "cache_hit": "chat, cache hit",
    "cache_miss": "chat, cache miss",
}
ADDED_P50_GOAL_MS = 0.35
RPS_SHARE_GOAL = 0.80
DIALECT_P50_SLACK_MS = 0.1
DIALECT_RPS_SHARE = 0.90
ROUTE_P50_SLACK_MS = 0.05
# What counting limits in Redis may cost beside the in-memory path (BENCH_REDIS=1).
REDIS_P50_SLACK_MS = 0.15
REDIS_RPS_SHARE = 0.85


class Row(NamedTuple):
    api: str
    target: str
    mode: str
    conc: int
    rps: float
    p50: float
    p99: float
    errors: int
    cpu_us: int | None  # CPU the proxy under test used per request; None for direct


Rows = dict[tuple[str, str, str, int], Row]


def upstream_api(api: str) -> str:
    """What the fake upstream is asked: its direct row is the one to subtract."""
    return "messages" if api == "messages" else "chat"


Rounds = dict[tuple[str, str, str, int], list[Row]]


def read_rounds(path: Path) -> Rounds:
    """Each cell's rows in the order of the rounds (the run writes round 1's cells first)."""
    rounds: Rounds = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        a, t, m, c, rps, p50, p99, err, cpu = line.split()
        row = Row(a, t, m, int(c), float(rps), float(p50), float(p99), int(err),
                  None if cpu == "-" else int(cpu))
        rounds.setdefault((a, t, m, row.conc), []).append(row)
    return rounds


def read_rows(path: Path) -> Rows:
    """One row per cell: the median of its rounds (errors summed)."""
    return medians(read_rounds(path))


def medians(rounds: Rounds) -> Rows:
    rows = {}
    for key, runs in rounds.items():
        cpus = [r.cpu_us for r in runs if r.cpu_us is not None]
        rows[key] = Row(*key, median([r.rps for r in runs]), median([r.p50 for r in runs]),
                        median([r.p99 for r in runs]), sum(r.errors for r in runs),
                        round(median(cpus)) if cpus else None)
    return rows


def added_p50(rows: Rows, row: Row) -> float | None:
    """p50 of `row` minus p50 of the upstream asked directly, same mode and concurrency."""
    direct = rows.get((upstream_api(row.api), "direct", row.mode, row.conc))
    return None if direct is None else row.p50 - direct.p50


def render(rows: Rows, header: list[str]) -> str:
    out = list(header)
    out += [
        "| API | target | mode | conc | rps | p50 ms | p99 ms | added p50 ms | CPU µs/req | errors |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    concs = sorted({k[3] for k in rows})
    for conc in concs:
        for mode in MODES:
            for target in TARGETS:
                for api, label in APIS.items():
                    r = rows.get((api, target, mode, conc))
                    if r is None:
                        continue
                    added = added_p50(rows, r)
                    shown = "-" if target == "direct" or added is None else f"{added:+.3f}"
                    out.append(
                        f"| {label} | {TARGET_LABELS.get(target, target)} | {mode} | {conc} "
                        f"| {r.rps:,.0f} | {r.p50:.3f} "
                        f"| {r.p99:.3f} | {shown} | {'-' if r.cpu_us is None else r.cpu_us} | {r.errors} |"
                    )
    out.append("")
    out += verdicts(rows)
    out += route_verdict(rows)
    out += cache_lines(rows)
    out += redis_verdicts(rows)
    dialects = dialect_table(rows)
    if dialects:
        out += ["", *dialects]
    total_errors = sum(r.errors for r in rows.values())
    if total_errors:
        out.append(f"WARNING: {total_errors} errors (non-2xx or socket) during the measured runs")
    return "\n".join(out) + "\n"


def verdicts(rows: Rows) -> list[str]:
    lines = []
    low = min(k[3] for k in rows)
    high = max(k[3] for k in rows)

    parts, ok = [], True
    for mode in MODES:
        gw, direct = rows.get(("chat", "llmgw", mode, low)), rows.get(("chat", "direct", mode, low))
        if gw is None or direct is None:
            parts.append(f"{mode} n/a")
            ok = False
            continue
        added = gw.p50 - direct.p50
        ok &= added <= ADDED_P50_GOAL_MS
        parts.append(f"{mode} {added:+.3f} ms ({gw.p50:.3f} vs direct {direct.p50:.3f})")
    lines.append(
        f"- {'PASS' if ok else 'FAIL'}: llmgw adds <= {ADDED_P50_GOAL_MS:g} ms at p50 to chat completions, "
        f"concurrency {low}: " + "; ".join(parts)
    )
    floors = []
    for target in ("passthrough", "passthrough-raw", "proxy-nginx"):
        for mode in MODES:
            r = rows.get(("chat", target, mode, low))
            added = None if r is None else added_p50(rows, r)
            if added is not None:
                floors.append(f"{TARGET_LABELS.get(target, target)} {mode} {added:+.3f} ms")
    if floors:
        lines.append(f"  (the floors add, same concurrency: {'; '.join(floors)})")
    lines += anchor_lines(rows, low, high)

    for gw_target, floor_target, what, floor_name in (
            ("llmgw", "passthrough", "1 worker", "the passthrough's"),
            ("llmgw-2w", "passthrough-2p", "2 workers", "the 2-process passthrough's")):
        parts, ok = [], True
        for mode in MODES:
            gw = rows.get(("chat", gw_target, mode, high))
            floor = rows.get(("chat", floor_target, mode, high))
            if gw is None or floor is None or floor.rps <= 0:
                parts.append(f"{mode} n/a")
                ok = False
                continue
            share = gw.rps / floor.rps
            ok &= share >= RPS_SHARE_GOAL
            parts.append(f"{mode} {share:.0%} ({gw.rps:,.0f} vs {floor.rps:,.0f} rps)")
        lines.append(
            f"- {'PASS' if ok else 'FAIL'}: llmgw with {what} serves >= {RPS_SHARE_GOAL:.0%} of "
            f"{floor_name} chat completions requests/s, concurrency {high}: " + "; ".join(parts)
        )
    return lines


def anchor_lines(rows: Rows, low: int, high: int) -> list[str]:
    """llmgw (1 worker) beside the anchor, LiteLLM's proxy with 1 worker, when the run had it: what
    each adds at p50 at the lowest concurrency and llmgw's requests/s as a multiple of LiteLLM's at
    the highest. Figures to read, not a goal."""
    added, rps = [], []
    for mode in MODES:
        anchor, gw = rows.get(("chat", "litellm", mode, low)), rows.get(("chat", "llmgw", mode, low))
        anchor_added = None if anchor is None else added_p50(rows, anchor)
        gw_added = None if gw is None else added_p50(rows, gw)
        if anchor_added is not None and gw_added is not None:
            added.append(f"{mode} {anchor_added:+.3f} ms (llmgw {gw_added:+.3f})")
        anchor, gw = rows.get(("chat", "litellm", mode, high)), rows.get(("chat", "llmgw", mode, high))
        if anchor is not None and gw is not None and anchor.rps > 0:
            rps.append(f"{mode} {gw.rps / anchor.rps:.1f}× ({gw.rps:,.0f} vs {anchor.rps:,.0f} rps)")
    lines = []
    if added:
        lines.append(f"  (the anchor, LiteLLM's proxy with 1 worker, adds at p50, concurrency "
                     f"{low}: {'; '.join(added)})")
    if rps:
        lines.append(f"  (llmgw with 1 worker against the anchor, requests/s at concurrency {high}: "
                     f"{'; '.join(rps)})")
    return lines


def route_verdict(rows: Rows) -> list[str]:
    """Chat completions through a route against the same to a plain model, lowest concurrency:
    the added p50 at most ROUTE_P50_SLACK_MS above."""
    low = min(k[3] for k in rows)
    parts, ok = [], True
    for mode in MODES:
        routed, plain = rows.get(("route", "llmgw", mode, low)), rows.get(("chat", "llmgw", mode, low))
        if routed is None or plain is None:
            continue
        diff = routed.p50 - plain.p50
        ok &= round(diff, 3) <= ROUTE_P50_SLACK_MS
        parts.append(f"{mode} {diff:+.3f} ms ({routed.p50:.3f} vs {plain.p50:.3f})")
    if not parts:
        return []
    return [f"- {'PASS' if ok else 'FAIL'}: a two-target priority route adds at most "
            f"{ROUTE_P50_SLACK_MS:g} ms at p50 to a plain model's chat completions, concurrency "
            f"{low}: " + "; ".join(parts)]


def cache_lines(rows: Rows) -> list[str]:
    """BENCH_CACHE=1: a hit and a miss beside the plain request and the pass-through floor, at
    each concurrency: p50 and requests/s."""
    lines = []
    for conc in sorted({k[3] for k in rows}):
        for mode in MODES:
            cells = [(label, rows.get((api, target, mode, conc))) for label, api, target in (
                ("hit", "cache_hit", "llmgw"), ("miss", "cache_miss", "llmgw"),
                ("no cache", "chat", "llmgw"), ("pass-through", "chat", "passthrough"))]
            if cells[0][1] is None:
                continue
            lines.append(f"- response cache, {mode}, concurrency {conc}: " + "; ".join(
                f"{label} p50 {r.p50:.3f} ms, {r.rps:,.0f} rps" for label, r in cells if r is not None))
    return lines


def redis_verdicts(rows: Rows) -> list[str]:
    """The installs with their limits in Redis against the same in memory, same run: p50 at the
    lowest concurrency at most REDIS_P50_SLACK_MS above, requests/s at the highest at least
    REDIS_RPS_SHARE of theirs."""
    low, high = min(k[3] for k in rows), max(k[3] for k in rows)
    lines = []
    for shared, local, what in (("llmgw-redis", "llmgw", "1 worker"),
                                ("llmgw-2w-redis", "llmgw-2w", "2 workers")):
        p50s, shares, ok = [], [], True
        for mode in MODES:
            lo, lo_mem = rows.get(("chat", shared, mode, low)), rows.get(("chat", local, mode, low))
            hi, hi_mem = rows.get(("chat", shared, mode, high)), rows.get(("chat", local, mode, high))
            if lo is not None and lo_mem is not None:
                diff = lo.p50 - lo_mem.p50
                ok &= round(diff, 3) <= REDIS_P50_SLACK_MS
                p50s.append(f"{mode} {diff:+.3f} ms ({lo.p50:.3f} vs {lo_mem.p50:.3f})")
            if hi is not None and hi_mem is not None and hi_mem.rps > 0:
                share = hi.rps / hi_mem.rps
                ok &= round(share, 2) >= REDIS_RPS_SHARE
                shares.append(f"{mode} {share:.0%} ({hi.rps:,.0f} vs {hi_mem.rps:,.0f} rps)")
        if p50s or shares:
            lines.append(
                f"- {'PASS' if ok else 'FAIL'}: limits in Redis, {what}: add at most "
                f"{REDIS_P50_SLACK_MS:g} ms at p50 (c{low}) and keep >= {REDIS_RPS_SHARE:.0%} of "
                f"the in-memory requests/s (c{high}): " + "; ".join(p50s + shares))
    return lines


def dialect_table(rows: Rows) -> list[str]:
    """Each other dialect through llmgw against chat completions through llmgw, same run: added
    p50 at the lowest concurrency within DIALECT_P50_SLACK_MS of chat's, requests/s at the highest
    at least DIALECT_RPS_SHARE of chat's."""
    low = min(k[3] for k in rows)
    high = max(k[3] for k in rows)
    out = [
        f"Dialects against chat completions through llmgw (goal: added p50 at c{low} at most "
        f"{DIALECT_P50_SLACK_MS:g} ms above chat's, requests/s at c{high} at least "
        f"{DIALECT_RPS_SHARE:.0%} of chat's):",
        "",
        f"| API | mode | added p50 c{low} | chat's | diff ms | rps c{high} | chat's | ratio | verdict "
        f"| CPU µs/req c{high} | chat's | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    failed, checked = [], 0
    for api, label in APIS.items():
        if api in ("chat", "route") or api.startswith("cache_"):  # not dialects: cache_lines
            continue
        for mode in MODES:
            lo, hi = rows.get((api, "llmgw", mode, low)), rows.get((api, "llmgw", mode, high))
            chat_lo, chat_hi = rows.get(("chat", "llmgw", mode, low)), rows.get(("chat", "llmgw", mode, high))
            if None in (lo, hi, chat_lo, chat_hi):
                continue
            assert lo is not None and hi is not None and chat_lo is not None and chat_hi is not None
            added, chat_added = added_p50(rows, lo), added_p50(rows, chat_lo)
            if added is None or chat_added is None or chat_hi.rps <= 0:
                continue
            diff, ratio = added - chat_added, hi.rps / chat_hi.rps
            ok = round(diff, 3) <= DIALECT_P50_SLACK_MS and round(ratio, 2) >= DIALECT_RPS_SHARE
            checked += 1
            if not ok:
                failed.append(f"{label} {mode}")
            cpu = "- | - | -"
            if hi.cpu_us is not None and chat_hi.cpu_us:
                cpu = f"{hi.cpu_us} | {chat_hi.cpu_us} | {hi.cpu_us / chat_hi.cpu_us:.2f}"
            out.append(
                f"| {label} | {mode} | {added:+.3f} | {chat_added:+.3f} | {diff:+.3f} | {hi.rps:,.0f} "
                f"| {chat_hi.rps:,.0f} | {ratio:.2f} | {'PASS' if ok else 'FAIL'} | {cpu} |"
            )
    if not checked:
        return []
    out.append("")
    verdict = "PASS" if not failed else "FAIL"
    detail = "every row" if not failed else "failing: " + ", ".join(failed)
    out.append(
        f"- {verdict}: other dialects within {DIALECT_P50_SLACK_MS:g} ms of chat completions' added p50 "
        f"(c{low}) and {1 - DIALECT_RPS_SHARE:.0%} of its requests/s (c{high}): {detail}"
    )
    out.append(
        "  (CPU µs/req: what llmgw's process used per request during the run; on a shared machine it "
        "moves less than rps, and rps at saturation is about its inverse.)"
    )
    return out


def figures(rounds: Rounds) -> dict[str, Any]:
    """The record's figures: every cell's median (as in the table) with its rounds' values, each
    round's added p50 taken against the direct row of the same round; the goals and verdicts."""
    rows = medians(rounds)
    cells = []
    for key, row in sorted(rows.items(), key=lambda kv: (kv[0][3], kv[0][2], kv[0][1], kv[0][0])):
        runs = rounds[key]
        direct = rounds.get((upstream_api(row.api), "direct", row.mode, row.conc), [])
        added = added_p50(rows, row)
        cells.append({
            "api": row.api, "target": row.target, "mode": row.mode, "conc": row.conc,
            "rps": row.rps, "p50_ms": row.p50, "p99_ms": row.p99, "errors": row.errors,
            "cpu_us": row.cpu_us,
            "added_p50_ms": None if row.target == "direct" or added is None else round(added, 3),
            "rounds": {
                "rps": [r.rps for r in runs], "p50_ms": [r.p50 for r in runs],
                "p99_ms": [r.p99 for r in runs], "cpu_us": [r.cpu_us for r in runs],
                "added_p50_ms": ([round(r.p50 - d.p50, 3) for r, d in zip(runs, direct, strict=False)]
                                 if row.target != "direct" else []),
            },
        })
    return {
        "labels": {"apis": APIS, "targets": {t: TARGET_LABELS.get(t, t) for t in TARGETS}},
        "goals": {"added_p50_ms": ADDED_P50_GOAL_MS, "rps_share": RPS_SHARE_GOAL,
                  "dialect_p50_slack_ms": DIALECT_P50_SLACK_MS, "dialect_rps_share": DIALECT_RPS_SHARE,
                  "redis_p50_slack_ms": REDIS_P50_SLACK_MS, "redis_rps_share": REDIS_RPS_SHARE},
        "verdicts": verdicts(rows) + route_verdict(rows) + redis_verdicts(rows),
        "rows": cells,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--header", action="append", default=[], help="a line to put above the table")
    parser.add_argument("--json", type=Path, help="also write the run's record here (bench/plots.py)")
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                        help="the run's settings for the record; load_before=L is the machine's, "
                             "commit=C and src_modified=B the code's when the run started")
    args = parser.parse_args()
    rounds = read_rounds(args.results)
    text = render(medians(rounds), [*args.header, ""] if args.header else [])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    if args.json is not None:
        settings = record.parse_meta(args.meta)
        load_before = settings.pop("load_before", None)
        command = settings.pop("command", None)
        # A short commit of digits alone reads as a number.
        code = ((str(settings.pop("commit")), bool(settings.pop("src_modified", False)))
                if "commit" in settings else None)
        meta = record.meta(load_before, code, command=command, settings=settings)
        record.write(args.json, "request_path", meta, figures(rounds))
    print(text, end="")


if __name__ == "__main__":
    main()
