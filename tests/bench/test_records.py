"""The benches' JSON records: what bench/report.py, bench/guard_load.py and bench/ondemand.py write
carries the run's metadata and every field bench/plots.py reads, and the printed report does not
change for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import guard_load, ondemand, record, report
from tests.bench.conftest import LITELLM, eval_report, guard_args, judge_cell, result_lines

ROOT = Path(__file__).resolve().parents[2]


def test_the_metadata_says_when_on_what_code_and_machine() -> None:
    meta = record.meta(1.25, command="bash bench/run.sh", settings={"rounds": 3})
    assert meta["date"].endswith("Z") and len(meta["date"]) == len("2026-12-03T11:34:00Z")
    assert meta["commit"] != "unknown" and isinstance(meta["src_modified"], bool)
    m = meta["machine"]
    assert m["cores"] >= 1 and m["cpu"] and m["load_before"] == 1.25
    assert isinstance(m["load_after"], float)
    assert meta["command"] == "bash bench/run.sh" and meta["settings"] == {"rounds": 3}


def test_meta_pairs_from_a_shell_script() -> None:
    assert record.parse_meta(["rounds=3", "load_before=0.42", "redis=true", "command=bash a b=c",
                              "fake_upstream=nginx 1.22.1"]) == {
        "rounds": 3, "load_before": 0.42, "redis": True, "command": "bash a b=c",
        "fake_upstream": "nginx 1.22.1"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        record.parse_meta(["rounds"])


def test_the_request_path_record_has_every_cell_and_its_rounds(tmp_path: Path) -> None:
    results = tmp_path / "results.txt"
    results.write_text(result_lines())
    figures = report.figures(report.read_rounds(results))
    rows = {(r["api"], r["target"], r["mode"], r["conc"]): r for r in figures["rows"]}
    assert len(rows) == 9 * 2 * 2 + 2
    gw = rows[("chat", "llmgw", "json", 1)]
    direct = rows[("chat", "direct", "json", 1)]
    # The same medians as the Markdown table, and each round's added p50 against its own round's
    # direct row.
    table = report.read_rows(results)[("chat", "llmgw", "json", 1)]
    assert (gw["rps"], gw["p50_ms"], gw["p99_ms"], gw["cpu_us"]) == (table.rps, table.p50, table.p99,
                                                                     table.cpu_us)
    assert gw["added_p50_ms"] == pytest.approx(gw["p50_ms"] - direct["p50_ms"], abs=1e-3)
    assert gw["rounds"]["added_p50_ms"] == pytest.approx(
        [g - d for g, d in zip(gw["rounds"]["p50_ms"], direct["rounds"]["p50_ms"], strict=True)], abs=1e-3)
    assert len(gw["rounds"]["rps"]) == 2
    assert direct["added_p50_ms"] is None and direct["cpu_us"] is None
    assert figures["goals"]["added_p50_ms"] == report.ADDED_P50_GOAL_MS
    assert figures["labels"]["targets"]["passthrough-raw"] == "raw floor (httptools server)"
    assert any(line.startswith("- PASS: llmgw adds") for line in figures["verdicts"])


def test_the_anchors_row_is_in_the_report_and_the_record(tmp_path: Path) -> None:
    """A run with BENCH_LITELLM=1: LiteLLM's proxy has its cells like any target, its label, and
    lines under the verdicts that set llmgw beside it (figures, not a goal)."""
    results = tmp_path / "results.txt"
    results.write_text(result_lines(LITELLM))
    figures = report.figures(report.read_rounds(results))
    rows = {(r["api"], r["target"], r["mode"], r["conc"]): r for r in figures["rows"]}
    assert len(rows) == 10 * 2 * 2 + 2
    anchor = rows[("chat", "litellm", "json", 1)]
    direct = rows[("chat", "direct", "json", 1)]
    assert anchor["added_p50_ms"] == pytest.approx(anchor["p50_ms"] - direct["p50_ms"], abs=1e-3)
    assert anchor["cpu_us"] == LITELLM[3] and len(anchor["rounds"]["rps"]) == 2
    assert figures["labels"]["targets"]["litellm"] == "LiteLLM proxy (the anchor)"
    verdicts = "\n".join(figures["verdicts"])
    assert "(the anchor, LiteLLM's proxy with 1 worker, adds at p50, concurrency 1: json +" in verdicts
    assert "(llmgw with 1 worker against the anchor, requests/s at concurrency 32: json 20.0× " in verdicts
    # No PASS or FAIL hangs on the anchor: the goals are the same with it or without it.
    without = report.figures(report.read_rounds(_written(tmp_path / "plain.txt", result_lines())))
    assert [v for v in figures["verdicts"] if "anchor" not in v] == without["verdicts"]
    table = report.render(report.medians(report.read_rounds(results)), [])
    assert "| chat completions | LiteLLM proxy (the anchor) | json | 1 | 239 | 4.200 |" in table


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_report_writes_the_record_and_prints_the_same_report(tmp_path: Path) -> None:
    results = tmp_path / "results.txt"
    results.write_text(result_lines())
    cmd = [sys.executable, str(ROOT / "bench" / "report.py"), str(results), "--header", "# bench"]
    plain = subprocess.run([*cmd, "--out", str(tmp_path / "a.md")], capture_output=True, text=True,
                           check=True, timeout=60)
    with_json = subprocess.run(
        [*cmd, "--out", str(tmp_path / "b.md"), "--json", str(tmp_path / "request_path.json"),
         "--meta", "load_before=0.31", "--meta", "command=BENCH_ROUNDS='2' bash bench/run.sh",
         "--meta", "rounds=2", "--meta", "redis=true"],
        capture_output=True, text=True, check=True, timeout=60)
    assert with_json.stdout == plain.stdout
    assert (tmp_path / "a.md").read_text() == (tmp_path / "b.md").read_text()
    rec = json.loads((tmp_path / "request_path.json").read_text())
    assert rec["bench"] == "request_path" and rec["schema"] == record.SCHEMA
    assert rec["meta"]["machine"]["load_before"] == 0.31
    assert rec["meta"]["command"] == "BENCH_ROUNDS='2' bash bench/run.sh"
    assert rec["meta"]["settings"] == {"rounds": 2, "redis": True}


def test_the_guard_record_has_the_chat_modes_and_every_judgments_row() -> None:
    chat = {mode: guard_load.Cell(latencies=[100.0 * (i + 1)] * 5) for i, (mode, _) in
            enumerate(guard_load.MODES)}
    chat["input"].blocked = 1
    cells = [judge_cell(1, True, 40, 0), judge_cell(8, True, 42, 120)]
    scaled = judge_cell(8, True, 70, 80, label="8, distinct texts, 2 judge replicas")
    figures = guard_load.figures(chat, True, cells, scaled, 41.2, guard_args())
    assert figures["budget_ms"] == 5000 and figures["judge"] == guard_load.JUDGE
    by_mode = {r["mode"]: r for r in figures["chat"]}
    assert by_mode["off"]["added_p50_ms"] is None
    assert by_mode["input"]["added_p50_ms"] == 100.0 and by_mode["input"]["blocked"] == 1
    eight = figures["judgments"][1]
    assert (eight["conc"], eight["texts"], eight["replicas"]) == (8, "distinct", 1)
    assert eight["verdicts_per_s"] == pytest.approx(42 / 20)
    assert (eight["judgments"], eight["shed"], eight["timed_out"]) == (162, 120, 0)
    assert eight["p99_ms"] is not None and eight["cache_saved"] == 0.9
    assert figures["autoscale"]["second_replica_after_s"] == 41.2
    assert figures["autoscale"]["row"]["replicas"] == 2


def test_the_ondemand_record_has_every_sample_and_the_bound() -> None:
    argv = ["/x/.venv/bin/llama-server", "--port", "1", "--ctx-size", "1024"]
    figures = ondemand.figures([1.2, 1.1, 1.3], [1.0, 0.9, 1.1], [1.4, 1.5, 1.3], argv)
    cold = figures["cold_start"]
    assert cold["through_llmgw_s"] == [1.2, 1.1, 1.3] and cold["by_hand_s"] == [1.0, 0.9, 1.1]
    assert cold["added_s"] == pytest.approx(0.2) and cold["allowed_s"] == 0.5 and cold["within_bound"]
    assert figures["swap_s"] == [1.4, 1.5, 1.3]
    assert figures["bound"] == {"fraction": ondemand.ALLOWED_FRACTION, "seconds": ondemand.ALLOWED_S}
    assert figures["replica_argv"][0] == "llama-server"


def test_the_judge_eval_record_has_each_sets_report_and_the_code_measured(tmp_path: Path) -> None:
    for name, counts in (("xstest", (150, 40, 50, 210)), ("sst", (90, 0, 10, 0))):
        (tmp_path / f"{name}.json").write_text(json.dumps(eval_report(*counts)))
    out, rec_path = tmp_path / "judge_eval.md", tmp_path / "judge_eval.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "judge_eval.py"), "--reports", str(tmp_path), "--sets",
         "xstest sst", "--out", str(out), "--json", str(rec_path), "--load-before", "1.5",
         "--header", "# llmgw judge eval", "--meta", "commit=abc1234", "--meta", "src_modified=false",
         "--meta", "command=bash bench/judge_eval.sh"],
        capture_output=True, text=True, check=True)
    rec = json.loads(rec_path.read_text())
    assert (rec["bench"], rec["judge"], rec["policy"]) == ("judge_eval", "demo-judge", "strict")
    assert [s["set"] for s in rec["sets"]] == ["xstest", "sst"]
    assert rec["sets"][0]["over_block"] == 0.16 and rec["sets"][1]["over_block"] is None
    assert (rec["meta"]["commit"], rec["meta"]["src_modified"]) == ("abc1234", False)
    assert rec["meta"]["machine"]["load_before"] == 1.5
    # The printed report is the file's, the table with its header.
    assert proc.stdout == out.read_text()
    assert proc.stdout.startswith("# llmgw judge eval\n| set | cases |")
    assert "| `sst` | 100 | 0 | 1.000 | 0.900 | 0.947 | – |" in proc.stdout
