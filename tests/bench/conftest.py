"""Records as the benches write them, made by their own writers from small made-up runs, so the
plots are tested on what the benches really emit."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench import guard_load, judge_eval, ondemand, record, report

# bench/run.sh's result lines (api target mode conc rps p50_ms p99_ms errors cpu_us), two rounds:
# the direct rows, llmgw with 1 and 2 workers (in memory and with Redis), the floors.
TARGETS = {
    # target: (rps at c1, p50 ms at c1, rps at c32, CPU µs per request)
    "direct": (16000, 0.060, 80000, None),
    "llmgw": (4000, 0.250, 12000, 80),
    "llmgw-redis": (2900, 0.400, 11000, 88),
    "passthrough": (3000, 0.320, 7000, 140),
    "passthrough-raw": (4500, 0.200, 11000, 75),
    "proxy-nginx": (6000, 0.150, 20000, 30),
    "llmgw-2w": (4000, 0.260, 14000, 100),
    "llmgw-2w-redis": (2800, 0.410, 11500, 115),
    "passthrough-2p": (3000, 0.330, 10000, 150),
}
# The anchor's row (BENCH_LITELLM=1), when a test asks for it: LiteLLM's proxy adding milliseconds.
LITELLM = (250, 4.0, 600, 1600)


def result_lines(litellm: tuple[float, float, float, int | None] | None = None) -> str:
    """The run's lines; with `litellm`, also the anchor's row with those figures."""
    targets = dict(TARGETS) if litellm is None else {**TARGETS, "litellm": litellm}
    lines = []
    for rnd in range(2):
        for mode in ("json", "stream"):
            for conc in (1, 32):
                for target, (rps1, p50, rps32, cpu) in targets.items():
                    rps = rps1 if conc == 1 else rps32
                    slower = 1 + 0.1 * rnd + (0.05 if mode == "stream" else 0)
                    lines.append(f"chat {target} {mode} {conc} {rps / slower:.1f} "
                                 f"{p50 * slower * (1 if conc == 1 else 20):.3f} 1.5 0 "
                                 f"{'-' if cpu is None else cpu}")
        lines.append(f"messages_via_chat llmgw json 1 3500 0.3{rnd} 1.2 0 95")
        lines.append(f"messages_via_chat llmgw json 32 10000 3.{rnd} 9.0 0 95")
    return "\n".join(lines) + "\n"


def judge_cell(conc: int, distinct: bool, verdicts: int, shed: int,
               label: str = "") -> guard_load.JudgeCell:
    cell = guard_load.JudgeCell(label or f"{conc}, {'distinct texts' if distinct else 'same text'}", conc)
    cell.seconds = 20.0
    cell.latencies = [300.0 + 40 * conc + 7 * i for i in range(verdicts)]
    cell.shed_latencies = [2.0] * shed
    cell.shed_in_gateway = [1.0] * shed
    cell.outcomes = {"safe": verdicts, **({"failed_shed": shed} if shed else {})}
    cell.cached, cell.evaluated = 900, 100
    return cell


def guard_args() -> argparse.Namespace:
    """What guard_load.figures reads of its command line."""
    return argparse.Namespace(budget_ms=5000, autoscale=True)


def write_records(to: Path, meta_extra: dict[str, object] | None = None,
                  litellm: tuple[float, float, float, int | None] | None = None) -> None:
    meta = record.meta(0.5, command="made up for the tests", **(meta_extra or {}))
    results = to / "results.txt"
    results.write_text(result_lines(litellm))
    record.write(to / "request_path.json", "request_path", {**meta, "settings": {"rounds": 2}},
                 report.figures(report.read_rounds(results)))
    results.unlink()

    chat = {mode: guard_load.Cell(latencies=[100.0 + 300 * i + k for k in range(10)])
            for i, (mode, _) in enumerate(guard_load.MODES)}
    judge_cells = [judge_cell(c, d, v, s) for d in (False, True)
                   for c, v, s in ((1, 40, 0), (8, 42, 120), (32, 38, 600))]
    scaled = judge_cell(8, True, 70, 80, label="8, distinct texts, 2 judge replicas")
    record.write(to / "guard.json", "guard", meta,
                 guard_load.figures(chat, True, judge_cells, scaled, 41.0, guard_args()))

    argv = ["/venv/bin/llama-server", "--port", "1234", "--ctx-size", "1024"]
    record.write(to / "ondemand.json", "ondemand", meta,
                 ondemand.figures([1.16, 1.2, 1.1, 1.3, 1.15], [0.99, 1.0, 0.95, 1.05, 0.98],
                                  [1.18, 1.25, 1.2, 1.22, 1.3], argv))

    record.write(to / "judge_eval.json", "judge_eval", meta,
                 judge_eval.figures({"xstest": eval_report(tp=150, fp=40, fn=50, tn=210),
                                     "sst": eval_report(tp=90, fp=0, fn=8, tn=0, failed=2)}))


def eval_report(tp: int, fp: int, fn: int, tn: int, failed: int = 0) -> dict[str, object]:
    """What `ctl guard eval --json` prints for a set, with these counts."""
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return {"judge": "demo-judge", "set": "s", "policy": "strict", "seconds": 61.5,
            "cases": tp + fp + fn + tn + failed, "failed": failed, "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": round(precision, 3), "recall": round(recall, 3),
            "f1": round(2 * precision * recall / (precision + recall), 3),
            "over_block": round(fp / (fp + tn), 3) if fp + tn else None, "p50_ms": 900.0,
            "p95_ms": 1400.0, "failures": {"failed_timeout": failed} if failed else {}, "categories": {}}


@pytest.fixture
def records(tmp_path: Path) -> Path:
    """A directory with the four records, as bench/figures/ holds them."""
    write_records(tmp_path)
    return tmp_path


@pytest.fixture
def records_with_anchor(tmp_path: Path) -> Path:
    """The same, from a run with BENCH_LITELLM=1: the request path has LiteLLM's proxy's row."""
    write_records(tmp_path, litellm=LITELLM)
    return tmp_path
