"""Printing ctl results as tables, or as JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def emit_json(data: Any) -> None:
    console.print_json(json.dumps(data, default=str))


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    t = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    console.print(t)


def when(at: datetime | None, none: str = "") -> str:
    """A time to the second, as tables show it (`none` when there is none)."""
    return at.isoformat()[:19] if at else none


def error(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
