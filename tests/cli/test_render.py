"""ctl's tables fit the output: names whole, other cells wrapped between words, columns that do not
fit left out with a note; a pipe is wide rather than 80 columns."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from llmgw.cli import render
from llmgw.cli.render import HIGH, LOW, PIPE_WIDTH, Col

NAME = "a-model-name-that-must-stay-whole"
COLUMNS = [Col("name", whole=True), "state", "why", Col("by", optional=True), "empty"]
ROWS = [[NAME, "loading on node-7", "waiting for a replica of the judge to become ready " * 2,
         "llmgw server init --demo", ""]]


@pytest.fixture
def width(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    # Whatever the terminal running the tests says: writing to capsys's pipe is what is tested.
    for name in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_a_narrow_table_keeps_names_whole_and_leaves_out_what_does_not_fit(
    width: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    width.setenv("COLUMNS", "70")
    render.table("t", COLUMNS, ROWS)
    out = capsys.readouterr().out
    assert max(len(line) for line in lines(out)) <= 70, out
    assert any(f" {NAME} " in line for line in lines(out)), out
    # The empty column first, then the optional one; what is shown wraps between words.
    assert "not shown at 70 columns: by, empty (empty)" in " ".join(out.split())
    assert any(" loading on " in line for line in lines(out)), out


def test_a_wide_enough_table_shows_every_column_as_it_is(
    width: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    width.setenv("COLUMNS", "250")
    render.table("t", COLUMNS, ROWS)
    out = capsys.readouterr().out
    assert "llmgw server init --demo" in out and "not shown" not in out
    assert [c.strip() for c in lines(out)[2].split("┃")[1:-1]] == ["name", "state", "why", "by", "empty"]


def test_a_table_written_to_a_pipe_is_pipe_width_wide_not_80(
    width: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    render.table("t", COLUMNS, ROWS)
    out = capsys.readouterr().out
    assert 80 < max(len(line) for line in lines(out)) <= PIPE_WIDTH, out
    assert "not shown" not in out and "llmgw server init --demo" in out


def test_the_lowest_priority_is_left_out_first_wherever_it_stands(
    width: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    width.setenv("COLUMNS", "50")
    render.table("t", [Col("id", whole=True), Col("by", priority=LOW), "state",
                       Col("error", priority=HIGH)],
                 [["job-1", "admin (sk-llmgw-Ab3d…x9Qz)", "failed", "the file is not a GGUF"]])
    out = capsys.readouterr().out
    assert max(len(line) for line in lines(out)) <= 50, out
    assert "GGUF" in out and "not shown at 50 columns: by;" in out, out


def test_a_plain_first_column_names_the_row_and_stays_whole(
    width: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    width.setenv("COLUMNS", "40")
    render.table("t", ["id", "what"], [["rep-3f9a0c1b2d4e5f", "a long text " * 6]])
    out = capsys.readouterr().out
    assert any(" rep-3f9a0c1b2d4e5f " in line for line in lines(out)), out
    assert max(len(line) for line in lines(out)) <= 40, out


def test_cell_text_is_never_read_as_markup(
    width: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    render.table("t", ["name", "note"], [["m", "[bold]not markup[/] [red]"]])
    assert "[bold]not markup[/] [red]" in capsys.readouterr().out


def test_times_are_to_the_minute_unless_seconds_are_asked_for() -> None:
    at = datetime(2026, 12, 3, 7, 18, 22, 123456, tzinfo=UTC)
    assert render.when(at) == "2026-12-03 07:18"
    assert render.when(at, seconds=True) == "2026-12-03 07:18:22"
    assert render.when(None, "never") == "never"


def test_a_path_shows_as_its_file_name() -> None:
    assert render.file_name("/root/.venv/lib/site-packages/gemma/gemma-3-270m-q4_k_m.gguf") == \
        "gemma-3-270m-q4_k_m.gguf"
    assert render.file_name("/") == "/"
