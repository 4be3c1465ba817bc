"""The public judge-evaluation sets shipped with llmgw (`ctl guard eval --set NAME`), and the
check that each file is what its note in `sets.json` says: a file edited, truncated or swapped
would score a judge on other cases than the ones its figures are quoted against."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from llmgw.cli.evaluate import Case, read_cases
from llmgw.core.guard import Safety

# Where the sets are: inside the package, so an installed llmgw has them (pyproject's package-data).
FOLDER = Path(__file__).resolve().parent
NOTES = "sets.json"


class Source(BaseModel):
    """Where a set's cases come from: a repository's file at a commit, and that file's hash."""

    repo: str
    commit: str
    path: str
    sha256: str


class SetNote(BaseModel):
    """One set's note: where it comes from, its licence, and what its shipped file must be."""

    model_config = ConfigDict(extra="forbid")
    title: str
    measures: str
    licence: str
    notice: str  # the set's attribution and licence, beside the file
    source: Source
    source_benign: Source | None = None  # JailbreakBench's benign half comes from another file
    file: str
    cases: int
    safe: int
    unsafe: int
    sha256: str


_NOTES = TypeAdapter(dict[str, SetNote])


class SetMismatch(ValueError):
    """A shipped set's file is not what its note says."""


def notes(folder: Path | None = None) -> dict[str, SetNote]:
    """Every shipped set's note, by the name `--set` takes."""
    path = (folder or FOLDER) / NOTES
    try:
        return _NOTES.validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise SetMismatch(f"cannot read the notes of the shipped sets ({path}): {exc}") from exc


def load(name: str, folder: Path | None = None) -> list[Case]:
    """A shipped set's cases, once its file matches its note (sha256, then the counts); else
    SetMismatch saying what differs. KeyError for a name no note has."""
    folder = folder or FOLDER
    note = notes(folder)[name]
    path = folder / note.file
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SetMismatch(f"the shipped set {name} is missing its file {path}: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != note.sha256:
        raise SetMismatch(f"the shipped set {name} ({path}) does not match its note: sha256 "
                          f"{digest[:12]}…, the note says {note.sha256[:12]}…; reinstall llmgw")
    try:
        cases = read_cases(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SetMismatch(f"the shipped set {name} ({path}) does not read: {exc}") from exc
    unsafe = sum(c.label == Safety.UNSAFE for c in cases)
    if (len(cases), len(cases) - unsafe, unsafe) != (note.cases, note.safe, note.unsafe):
        raise SetMismatch(f"the shipped set {name} ({path}) does not match its note: "
                          f"{len(cases)} cases ({len(cases) - unsafe} safe, {unsafe} unsafe), "
                          f"the note says {note.cases} ({note.safe} safe, {note.unsafe} unsafe)")
    return cases
