"""The JSON record a bench writes beside its Markdown: the run's metadata and its figures.

`bench/plots.py` draws the docs' plots from these records, and `bench/figures/` keeps the ones the
docs show, so a record carries what a reader needs to judge the figures: when and on what commit
they were taken, and on what machine under what load.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Bumped when a field plots.py reads changes meaning, so an old record is refused, not misread.
SCHEMA = 1


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def commit() -> tuple[str, bool]:
    """The short commit of HEAD, and whether src/ differs from it (the code measured is then not
    that commit's)."""
    head = _git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return "unknown", False
    return head.stdout.strip(), _git("diff", "--quiet", "HEAD", "--", "src").returncode != 0


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _hypervisor() -> bool:
    """Whether the CPU says it runs under a hypervisor (a VM's cores are shared with its host's)."""
    try:
        return any(line.startswith("flags") and " hypervisor" in line
                   for line in Path("/proc/cpuinfo").read_text().splitlines())
    except OSError:
        return False


def machine(load_before: float | None = None) -> dict[str, Any]:
    """Cores this process may use, the CPU, and the 1-minute load average before (as the caller
    measured it, before its load) and now."""
    return {
        "cores": len(os.sched_getaffinity(0)),
        "cpu": cpu_model(),
        "virtual": _hypervisor(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_before": load_before,
        "load_after": round(os.getloadavg()[0], 2),
    }


def meta(load_before: float | None = None, code: tuple[str, bool] | None = None,
         **extra: Any) -> dict[str, Any]:
    """A record's metadata: the date (UTC, when the figures were written), commit and machine,
    plus what the bench adds (its settings, the command that ran it). `code` is `commit()` as the
    bench took it when it started its servers: that is the code measured, and others may commit
    or edit while a long run goes on."""
    sha, modified = commit() if code is None else code
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": sha,
        "src_modified": modified,
        "machine": machine(load_before),
        **extra,
    }


def parse_meta(pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs from a shell script: a VALUE that reads as JSON (a number, true) is
    taken as such, anything else as a string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--meta takes KEY=VALUE, not {pair!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def write(path: Path, bench: str, meta: dict[str, Any], figures: dict[str, Any]) -> None:
    """Write the record: sorted keys and a final newline, so two records diff line by line."""
    record = {"bench": bench, "schema": SCHEMA, "meta": meta, **figures}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
