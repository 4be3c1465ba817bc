"""Printing ctl results as tables, or as JSON for scripts."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePath
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from llmgw.core.protocol.keys import LiveCounts

console = Console()
err_console = Console(stderr=True)

# A pipe has no width, and rich gives it 80 columns, where wide tables lose columns: rows that
# grep or a pager reads are best whole. COLUMNS, when set, still wins.
PIPE_WIDTH = 200
# A column that wraps is not made narrower than this (or its longest word, if longer), so its
# cells break between words into a few lines rather than into towers of fragments.
WRAP_MIN = 10
# An optional column is shown only with this much room (or its widest cell's, if less): one
# squeezed into a tower of words is worth less than the room it takes from the others.
OPTIONAL_MIN = 20
# A column that cuts its cells (`clip`) keeps this much of them, an ellipsis included.
CLIP_MIN = 12

# How much a column answers its table's question. When a table does not fit, empty columns are
# left out first, then the lowest priority (optional ones first among equals, then from the
# right), so what a reader came for (a failed job's error, a judge keeper's reason) stays.
LOW, NORMAL, HIGH = -1, 0, 1


@dataclass(frozen=True)
class Col:
    """A table column: its header, and how its cells give way when the table is too wide."""

    header: str
    # A name or id, to read and copy whole: never broken nor cut; other columns give way first.
    whole: bool = False
    # Left out before other columns of its priority (`--json` and `show` have it).
    optional: bool = False
    # Cut with an ellipsis rather than folded where a word is wider than the column (paths).
    clip: bool = False
    # LOW, NORMAL or HIGH: the order columns are left out in. A HIGH column also folds a word
    # wider than OPTIONAL_MIN rather than be left out for it.
    priority: int = NORMAL


def emit_json(data: Any) -> None:
    console.print_json(json.dumps(data, default=str))


def table(title: str, columns: Sequence[str | Col], rows: Sequence[Sequence[Any]]) -> None:
    """Rows as a table that fits the output: names whole, other cells wrapped between words, and
    columns left out (empty, optional, then from the right) with a note when even that would not
    fit (the lowest priority first). A plain header makes a column that wraps, but the first: it
    names the row, kept whole."""
    cols = [c if isinstance(c, Col) else Col(c, whole=i == 0) for i, c in enumerate(columns)]
    cells = [[Text("" if v is None else str(v)) for v in row] for row in rows]
    out = _output()
    room = out.width
    widest = [max([_width(Text(c.header)), *(_width(r[i]) for r in cells)]) for i, c in enumerate(cols)]
    least = [_least(c, widest[i], [Text(c.header), *(r[i] for r in cells)]) for i, c in enumerate(cols)]
    shown = list(range(len(cols)))
    empty = [i for i in shown if not any(r[i].plain.strip() for r in cells)]
    order = sorted((i for i in shown if not cols[i].whole or i in empty),
                   key=lambda i: (i not in empty, cols[i].priority, not cols[i].optional, -i))
    left_out: list[int] = []
    for i in order:
        if _fits([least[j] for j in shown], room):
            break
        shown.remove(i)
        left_out.append(i)
    widths = _narrowed([widest[i] for i in shown], [least[i] for i in shown],
                       [cols[i].clip for i in shown], room - _frame(len(shown)))
    t = Table(title=title, title_justify="left", show_lines=False)
    for i, width in zip(shown, widths, strict=True):
        c = cols[i]
        fixed = width if width < widest[i] else None  # a column at its natural width is rich's to size
        if c.whole:
            t.add_column(c.header, no_wrap=True, min_width=widest[i])
        else:
            t.add_column(c.header, width=fixed, overflow="ellipsis" if c.clip else "fold")
    for row in cells:
        t.add_row(*(row[i] for i in shown))
    out.print(t)
    if left_out:
        names = [cols[i].header + (" (empty)" if i in empty else "") for i in sorted(left_out)]
        out.print(f"not shown at {room} columns: {', '.join(names)}; --json shows every field",
                  style="dim", highlight=False, markup=False)


def _output() -> Console:
    """Where tables go: `console`, or for a pipe when COLUMNS is unset, one PIPE_WIDTH wide."""
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return console
    return Console(width=PIPE_WIDTH, file=console.file)


def _width(text: Text) -> int:
    return max((cell_len(line) for line in text.plain.splitlines()), default=0)


def _least(col: Col, widest: int, texts: list[Text]) -> int:
    """How narrow a column may become."""
    if col.whole:
        return widest
    if col.clip:
        return min(widest, CLIP_MIN)
    longest_word = max((cell_len(w) for t in texts for w in t.plain.split()), default=0)
    if col.priority >= HIGH:
        longest_word = min(longest_word, OPTIONAL_MIN)
    return min(widest, max(longest_word, OPTIONAL_MIN if col.optional else WRAP_MIN))


def _frame(columns: int) -> int:
    """What a table's borders and cell padding take of a line: a rule each side, one space either
    side of every cell and a rule between cells."""
    return 3 * columns + 1


def _fits(widths: list[int], room: int) -> bool:
    return sum(widths) + _frame(len(widths)) <= room


def _narrowed(widest: list[int], least: list[int], clip: list[bool], room: int) -> list[int]:
    """Column widths that fit `room`: the widest column gives way a character at a time, none
    below its least (so what does not fit stays over: rich then cuts it). Columns that wrap give
    way before those that cut, as a line more loses nothing."""
    widths = list(widest)
    for cutting in (False, True):
        while sum(widths) > room:
            can = [i for i, w in enumerate(widths) if w > least[i] and clip[i] == cutting]
            if not can:
                break
            widths[max(can, key=lambda i: widths[i])] -= 1
    return widths


def when(at: datetime | None, none: str = "", seconds: bool = False) -> str:
    """A time as tables show it, to the minute (`seconds`: to the second; `none` when there is
    none): short, and with a space where ISO has a T, so a narrow column breaks it there."""
    return at.isoformat(" ")[:19 if seconds else 16] if at else none


def file_name(path: str) -> str:
    """A path as tables show it: its file name (`--json` and `show` have the whole path)."""
    return PurePath(path).name or path


def error(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)


def live(counts: LiveCounts | None) -> None:
    """One line of what a key or team uses of its limits now, and where that was counted."""
    if counts is None:
        return
    console.print(f"now ({counts.source}): {counts.requests_this_minute} requests and "
                  f"{counts.tokens_this_minute:,} tokens this minute, {counts.in_flight} in flight; "
                  f"{counts.tokens_today:,} tokens today, {counts.tokens_this_month:,} this month",
                  highlight=False, markup=False)
