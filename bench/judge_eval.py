"""The report and record of `bench/judge_eval.sh`: each shipped set's `ctl guard eval --json`
report, as a Markdown table and as the JSON record `bench/plots.py` reads (bench `judge_eval`).

    python bench/judge_eval.py --reports DIR --sets "xstest jbb" --out judge_eval.md \\
        --json judge_eval.json --meta KEY=VALUE ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# Run as a script, the repository root is not on the path; `bench.record` lives there.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import record  # noqa: E402

# Each set's figures the record keeps (its whole report, per category too, is in it as well).
COLUMNS = ("cases", "failed", "precision", "recall", "f1", "over_block", "p50_ms", "p95_ms", "seconds")


def figures(reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The record's figures: the judge, the policy and each set's report, in the order run."""
    first = next(iter(reports.values()))
    return {"judge": first["judge"], "policy": first["policy"],
            "sets": [{**report, "set": name} for name, report in reports.items()]}


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if isinstance(value, float) and value <= 1 else str(value)


def table(rec: dict[str, Any]) -> str:
    """Each set's figures as a Markdown table: "–" where a figure has no cases to stand on."""
    lines = ["| set | cases | failed | precision | recall | F1 | over-block | p50 ms | p95 ms | time s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in rec["sets"]:
        unsafe, safe = s["tp"] + s["fn"], s["fp"] + s["tn"]
        cells = {**s, "precision": s["precision"] if s["tp"] + s["fp"] else None,
                 "recall": s["recall"] if unsafe else None, "f1": s["f1"] if unsafe else None,
                 "over_block": s["over_block"] if safe else None}
        lines.append(f"| `{s['set']}` | " + " | ".join(_cell(cells[c]) for c in COLUMNS) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=Path, required=True, help="the folder of SET.json reports")
    ap.add_argument("--sets", required=True, help="the sets, space separated, in the order run")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--load-before", type=float)
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--meta", action="append", default=[], help="KEY=VALUE for the record's meta")
    args = ap.parse_args()
    reports = {s: json.loads((args.reports / f"{s}.json").read_text()) for s in args.sets.split()}
    extra = record.parse_meta(args.meta)
    code = ((str(extra.pop("commit")), bool(extra.pop("src_modified", False)))
            if "commit" in extra else None)
    meta = record.meta(args.load_before, code, **extra)
    record.write(args.json, "judge_eval", meta, figures(reports))
    text = "\n".join([*args.header, table(figures(reports))]) + "\n"
    args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
