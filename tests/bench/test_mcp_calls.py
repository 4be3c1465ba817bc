"""bench/mcp_calls.py: its client speaks MCP to a real server and checks every answer, and its
report sets each row against the direct one and judges the issue's goal."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench import mcp_calls


def test_the_direct_half_measures_the_sdk_server_with_every_call_answered(tmp_path: Path) -> None:
    args = argparse.Namespace(duration=0.5, warmup=0.1, direct_only=True, no_guard_row=True)
    cells = mcp_calls.run_rows(tmp_path, args)
    assert [(c["row"], c["concurrency"]) for c in cells] == [("direct", 1), ("direct", 32)]
    for cell in cells:
        assert cell["errors"] == 0 and cell["calls"] > 10, cell
        assert 0 < cell["p50_ms"] <= cell["p99_ms"]
        assert cell["server_cpu_us_per_call"] > 0 and cell["client_cpu_us_per_call"] > 0


def _cell(row: str, concurrency: int, calls_per_s: float, p50_ms: float) -> dict[str, Any]:
    return {"row": row, "concurrency": concurrency, "calls": 100, "errors": 0,
            "calls_per_s": calls_per_s, "p50_ms": p50_ms, "p99_ms": p50_ms * 2,
            "server_cpu_us_per_call": 300.0, "client_cpu_us_per_call": 100.0}


def test_the_report_adds_llmgws_p50_to_directs_and_judges_the_goal() -> None:
    cells = [_cell("direct", 1, 800, 1.0), _cell("direct", 32, 2000, 10.0),
             _cell("llmgw, 1 worker", 1, 600, 1.4), _cell("llmgw, 1 worker", 32, 900, 30.0),
             _cell("llmgw + guard", 1, 20, 51.0)]
    text = mcp_calls.report(cells, argparse.Namespace(duration=10.0))
    assert "| llmgw, 1 worker | 1 | 600 | 1.40 | 2.80 | +0.40 | 300 | 100 | 0 |" in text
    assert "| llmgw + guard | 1 | 20 | 51.00 | 102.00 | +50.00 |" in text
    assert ("FAIL: llmgw, 1 worker, serves 900 calls/s at concurrency 32 (goal: at least 1,000 "
            "per worker without a guard; the upstream alone serves 2,000).") in text
