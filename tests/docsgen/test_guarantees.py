"""Every test the Guarantees page names exists: a promise never points at a test that was renamed
or removed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def defined(path: Path) -> set[str]:
    """The functions a module defines (tests, and the fixtures that hold a promise too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_test_the_guarantees_page_names_exists() -> None:
    refs = REF.findall((ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8"))
    assert len(refs) > 200
    missing = [f"{file}::{name}" for file, name in refs
               if not (ROOT / file).is_file() or name not in defined(ROOT / file)]
    assert not missing, "docs/guarantees.md names tests that do not exist:\n" + "\n".join(missing)
