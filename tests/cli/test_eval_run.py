"""Judging a set N at a time for `ctl guard eval`: answers in the cases' order, the first error
stops the run, and the progress bar shows on a terminal only."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from llmgw.cli import render
from llmgw.cli.client import CtlError
from llmgw.cli.eval_run import cases_of, judge_all
from llmgw.cli.evaluate import Case

CASES = [Case(f"case {i}", "safe") for i in range(6)]


def echo(case: Case) -> dict[str, Any]:
    return {"text": case.text}


def test_answers_come_back_in_the_cases_order_whatever_order_they_finish_in() -> None:
    # The first case is answered last: only once every other one has been.
    finished: list[str] = []
    rest_done = threading.Event()
    lock = threading.Lock()

    def judge(case: Case) -> dict[str, Any]:
        if case is CASES[0]:
            assert rest_done.wait(10)
        with lock:
            finished.append(case.text)
            if len(finished) == len(CASES) - 1:
                rest_done.set()
        return echo(case)

    answers = judge_all(judge, CASES, len(CASES), "j")
    assert finished[-1] == "case 0"
    assert [a["text"] for a in answers] == [c.text for c in CASES]


def test_the_first_error_stops_the_run_and_is_raised() -> None:
    judged: list[str] = []

    def judge(case: Case) -> dict[str, Any]:
        judged.append(case.text)
        if case is CASES[1]:
            raise CtlError("401: invalid admin key")
        return echo(case)

    with pytest.raises(CtlError, match="invalid admin key"):
        judge_all(judge, CASES, 1, "j")
    assert judged == ["case 0", "case 1"]  # nothing more was sent once a call failed


@pytest.mark.parametrize("terminal", [True, False])
def test_the_progress_bar_shows_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch, terminal: bool) -> None:
    out = io.StringIO()
    monkeypatch.setattr(render, "err_console", Console(file=out, force_terminal=terminal, width=100))
    judge_all(echo, CASES, 2, "demo-judge on xstest")
    assert ("demo-judge on xstest" in out.getvalue()) is terminal


def test_a_shipped_sets_name_wins_over_a_file_of_that_name_and_dot_slash_reaches_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sst").write_text('{"text": "mine", "label": "safe"}\n')
    monkeypatch.chdir(tmp_path)
    name, shipped = cases_of("sst")
    assert (name, len(shipped)) == ("sst", 100)
    assert cases_of("./sst") == ("sst", [Case("mine", "safe")])
