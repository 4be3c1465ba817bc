"""Running `ctl guard eval`: where its cases come from, and judging them N at a time with a
progress bar."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from llmgw.cli import evalsets, render
from llmgw.cli.evaluate import Case, read_cases

Judge = Callable[[Case], dict[str, Any]]


def cases_of(name_or_path: str) -> tuple[str, list[Case]]:
    """The cases `--set` names: a shipped set (checked against its note) or a JSONL file; and the
    name to show for them. ValueError (SetMismatch among them) or OSError when they cannot be had."""
    shipped = evalsets.notes()
    if name_or_path in shipped:
        return name_or_path, evalsets.load(name_or_path)
    path = Path(name_or_path)
    if not path.exists() and "/" not in name_or_path and not name_or_path.endswith(".jsonl"):
        raise ValueError(f"no set {name_or_path!r}: the shipped sets are {', '.join(shipped)}; "
                         "or give the path of a JSONL file")
    return path.name, read_cases(path.read_text(encoding="utf-8"))


def judge_all(judge: Judge, cases: list[Case], concurrency: int, what: str) -> list[dict[str, Any]]:
    """Each case's answer, in the cases' order, with at most `concurrency` judgments in flight.
    The first error a call raises stops the run (the calls in flight finish, no new one starts)
    and is raised here. A bar shows progress on stderr when stderr is a terminal."""
    answers: list[dict[str, Any]] = [{} for _ in cases]
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=render.err_console, transient=True,
                        disable=not render.err_console.is_terminal)
    with progress, ThreadPoolExecutor(max_workers=concurrency) as pool:
        task = progress.add_task(what, total=len(cases))
        stop = threading.Event()

        def one(i: int) -> None:
            if stop.is_set():  # a call failed: send no more (a bad key would fail them all)
                return
            try:
                answers[i] = judge(cases[i])
            except BaseException:
                stop.set()
                raise
            progress.advance(task)

        futures = [pool.submit(one, i) for i in range(len(cases))]
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in done if f.exception() is not None), None)
        if failed is not None:
            for f in pending:
                f.cancel()
            failed.result()
    return answers
