"""The benchmark plots and tables, drawn by bench/plots.py from the records in bench/figures/.

bench/figures/ holds the JSON of the documented run of each bench (see bench/README.md to refresh
it); the site shows its plots as benchmarks/NAME.png, and a page asks for a table of the same
figures with a line of its own, `<!-- llmgw:plot-table NAME -->`.
"""

from __future__ import annotations

import re
from pathlib import Path

from bench import plots

FIGURES = Path(__file__).resolve().parent.parent / "bench" / "figures"
MARKER = re.compile(r"^<!-- llmgw:plot-table (?P<name>[a-z-]+) -->$", re.MULTILINE)


def generated(figures: Path = FIGURES) -> dict[str, bytes]:
    """The plots the benchmarks page shows (URI → PNG)."""
    return {f"benchmarks/{name}": png for name, png in plots.draw(figures).items()}


def render(name: str, figures: Path = FIGURES) -> str:
    """The table `name` of the recorded figures, in Markdown."""
    return plots.table(figures, name)


def expand(markdown: str, figures: Path = FIGURES) -> str:
    """Each plot-table marker replaced by its table."""
    return MARKER.sub(lambda m: render(m.group("name"), figures), markdown)
