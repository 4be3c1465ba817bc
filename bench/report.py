"""Turn the run's result lines into the Markdown table and the two goal verdicts.

Input: a file of whitespace-separated rows `target mode conc rps p50_ms p99_ms errors`,
as `bench/run.sh` writes them. Prints the report and writes it to `--out`.
Exit status is 0 whatever the verdicts; the report says PASS or FAIL.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NamedTuple

TARGETS = ("direct", "llmgw", "passthrough")
MODES = ("json", "stream")
ADDED_P50_GOAL_MS = 1.0
RPS_SHARE_GOAL = 0.60


class Row(NamedTuple):
    target: str
    mode: str
    conc: int
    rps: float
    p50: float
    p99: float
    errors: int


def read_rows(path: Path) -> dict[tuple[str, str, int], Row]:
    rows = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        t, m, c, rps, p50, p99, err = line.split()
        row = Row(t, m, int(c), float(rps), float(p50), float(p99), int(err))
        rows[(t, m, row.conc)] = row
    return rows


def render(rows: dict[tuple[str, str, int], Row], header: list[str]) -> str:
    out = list(header)
    out += [
        "| target | mode | conc | rps | p50 ms | p99 ms | added p50 ms | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    concs = sorted({k[2] for k in rows})
    for conc in concs:
        for mode in MODES:
            direct = rows.get(("direct", mode, conc))
            for target in TARGETS:
                r = rows.get((target, mode, conc))
                if r is None:
                    continue
                added = "-" if target == "direct" or direct is None else f"{r.p50 - direct.p50:+.3f}"
                out.append(
                    f"| {target} | {mode} | {conc} | {r.rps:,.0f} | {r.p50:.3f} | {r.p99:.3f} "
                    f"| {added} | {r.errors} |"
                )
    out.append("")
    out += verdicts(rows)
    total_errors = sum(r.errors for r in rows.values())
    if total_errors:
        out.append(f"WARNING: {total_errors} errors (non-2xx or socket) during the measured runs")
    return "\n".join(out) + "\n"


def verdicts(rows: dict[tuple[str, str, int], Row]) -> list[str]:
    lines = []
    low = min(k[2] for k in rows)
    high = max(k[2] for k in rows)

    parts, ok = [], True
    for mode in MODES:
        gw, direct = rows.get(("llmgw", mode, low)), rows.get(("direct", mode, low))
        if gw is None or direct is None:
            parts.append(f"{mode} n/a")
            ok = False
            continue
        added = gw.p50 - direct.p50
        ok &= added < ADDED_P50_GOAL_MS
        parts.append(f"{mode} {added:+.3f} ms ({gw.p50:.3f} vs direct {direct.p50:.3f})")
    lines.append(
        f"- {'PASS' if ok else 'FAIL'}: llmgw adds < {ADDED_P50_GOAL_MS:g} ms at p50, "
        f"concurrency {low}: " + "; ".join(parts)
    )

    parts, ok = [], True
    for mode in MODES:
        gw, floor = rows.get(("llmgw", mode, high)), rows.get(("passthrough", mode, high))
        if gw is None or floor is None or floor.rps <= 0:
            parts.append(f"{mode} n/a")
            ok = False
            continue
        share = gw.rps / floor.rps
        ok &= share >= RPS_SHARE_GOAL
        parts.append(f"{mode} {share:.0%} ({gw.rps:,.0f} vs passthrough {floor.rps:,.0f} rps)")
    lines.append(
        f"- {'PASS' if ok else 'FAIL'}: llmgw serves >= {RPS_SHARE_GOAL:.0%} of the passthrough's "
        f"requests/s, concurrency {high}: " + "; ".join(parts)
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--header", action="append", default=[], help="a line to put above the table")
    args = parser.parse_args()
    text = render(read_rows(args.results), [*args.header, ""] if args.header else [])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
