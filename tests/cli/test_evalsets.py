"""The public sets shipped for `ctl guard eval --set`: each file is what its note says, a file that
is not is refused, and an installed llmgw carries them."""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from llmgw.cli import evalsets
from llmgw.cli.evaluate import read_cases

ROOT = Path(__file__).resolve().parents[2]
# What each set is, from its source (the issue and the sets' papers): cases, safe, unsafe.
EXPECTED = {"xstest": (450, 250, 200), "jbb": (200, 100, 100), "jbb-pair": (69, 0, 69),
            "sst": (100, 0, 100)}


@pytest.fixture
def copied(tmp_path: Path) -> Path:
    """A copy of the shipped sets and their notes, to tamper with."""
    folder = tmp_path / "evalsets"
    shutil.copytree(evalsets.FOLDER, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return folder


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_shipped_set_matches_its_note_and_its_source(name: str) -> None:
    note = evalsets.notes()[name]
    cases = evalsets.load(name)
    data = (evalsets.FOLDER / note.file).read_bytes()
    assert hashlib.sha256(data).hexdigest() == note.sha256
    labels = Counter(c.label for c in cases)
    assert (len(cases), labels["safe"], labels["unsafe"]) == EXPECTED[name]
    assert (note.cases, note.safe, note.unsafe) == EXPECTED[name]
    assert all(c.text and c.category and c.direction == "input" for c in cases)
    assert len({c.text for c in cases}) == len(cases), "a case is there twice"
    # Its source is named down to the commit, and its licence and attribution ship beside it.
    assert len(note.source.commit) == 40 and len(note.source.sha256) == 64
    notice = (evalsets.FOLDER / note.notice).read_text(encoding="utf-8")
    assert note.source.repo in notice and note.source.commit in notice


def test_xstest_has_its_unsafe_prompts_in_the_contrast_categories() -> None:
    cases = evalsets.load("xstest")
    assert {c.label for c in cases if c.category.startswith("contrast_")} == {"unsafe"}
    assert {c.label for c in cases if not c.category.startswith("contrast_")} == {"safe"}
    assert len({c.category for c in cases}) == 18


def test_jbb_covers_its_ten_categories_with_ten_harmful_and_ten_benign_each() -> None:
    per = Counter((c.category, c.label) for c in evalsets.load("jbb"))
    assert len({category for category, _ in per}) == 10
    assert set(per.values()) == {10}


def test_a_set_file_edited_after_its_note_is_refused(copied: Path) -> None:
    path = copied / "xstest.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    # A label flipped: the same count of cases, a different set.
    path.write_text(lines[0].replace('"safe"', '"unsafe"') + "".join(lines[1:]), encoding="utf-8")
    with pytest.raises(evalsets.SetMismatch, match=r"xstest .*does not match its note: sha256"):
        evalsets.load("xstest", copied)


def test_a_truncated_set_file_is_refused_even_when_its_hash_was_rewritten(copied: Path) -> None:
    path = copied / "sst.jsonl"
    data = "".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:90]).encode()
    path.write_bytes(data)
    notes = json.loads((copied / "sets.json").read_text(encoding="utf-8"))
    notes["sst"]["sha256"] = hashlib.sha256(data).hexdigest()
    (copied / "sets.json").write_text(json.dumps(notes), encoding="utf-8")
    with pytest.raises(evalsets.SetMismatch, match=r"90 cases \(0 safe, 90 unsafe\), the note says 100"):
        evalsets.load("sst", copied)


def test_a_missing_set_file_is_refused(copied: Path) -> None:
    (copied / "jbb.jsonl").unlink()
    with pytest.raises(evalsets.SetMismatch, match=r"jbb is missing its file"):
        evalsets.load("jbb", copied)


def test_each_case_keeps_the_id_it_has_in_its_source() -> None:
    # So a case can be traced back to its row in the source.
    for name in EXPECTED:
        cases = [json.loads(line) for line in
                 (evalsets.FOLDER / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
        assert all(set(c) == {"text", "label", "direction", "category", "id"} for c in cases)
        assert len({c["id"] for c in cases}) == len(cases)
        assert read_cases((evalsets.FOLDER / f"{name}.jsonl").read_text(encoding="utf-8"))


def test_the_sets_ship_in_the_package() -> None:
    # pip install puts package data only where pyproject names it: every file of the sets must be.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["llmgw"]
    package = ROOT / "src" / "llmgw"
    shipped = {p for pattern in patterns for p in package.glob(pattern)}
    data = [p for p in evalsets.FOLDER.iterdir() if p.suffix in (".jsonl", ".json", ".md")]
    assert len(data) == 4 + 1 + 4  # four sets, the notes, three notices and the README
    assert set(data) <= shipped
