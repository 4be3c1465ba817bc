"""The architecture page names modules a newcomer can open: each one it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "concepts" / "architecture.md"
PACKAGE = ROOT / "src" / "llmgw"


def test_every_module_the_architecture_page_names_exists() -> None:
    named = set(re.findall(r"`([a-z_/]+\.py)`", PAGE.read_text()))
    assert len(named) > 30
    files = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")}
    # A bare file name (in a list under its package's step) need only exist somewhere.
    missing = [n for n in named if n not in files and not any(f.endswith("/" + n) for f in files)]
    assert missing == []
