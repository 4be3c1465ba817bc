"""What this host needs to run an engine binary, learned once per binary and host.

llama.cpp built for the CPU it was built on may still die with SIGILL there: a virtual machine
can advertise AMX that it cannot run, and ggml's AMX kernels for repacked weights then fault at
the first matrix product. `--no-repack` keeps the engine off those kernels. The first start that
dies that way (or `llmgw doctor`'s probe) records it here, keyed by the binary (path, size,
mtime) and the CPU (model and flags), so every later start on this host adds the flag at once
and a rebuilt binary or a moved data dir is tried afresh.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

logger = logging.getLogger(__name__)

FILE_NAME = "engine-compat.json"


def cpu_fingerprint(cpuinfo: str | None = None) -> str:
    """A short hash of the CPU's model name and flags (those decide what a build can run)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    wanted = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    seen: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in wanted and key not in seen:
            seen[key] = " ".join(sorted(value.split())) if key in ("flags", "Features") else value.strip()
    return hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()[:16]


def binary_key(binary: str, cpu: str) -> str:
    """The record's key: the binary as it is on disk now, on this CPU."""
    path = os.path.realpath(binary)
    try:
        st = os.stat(path)
        stamp = f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        stamp = "missing"
    return f"{path}|{stamp}|{cpu}"


@dataclass(frozen=True)
class Learned:
    """Arguments a binary needs on this host, and why."""

    args: tuple[str, ...]
    reason: str
    learned_at: str


class EngineCompat:
    """The engine arguments this host needs, kept in `DATA_DIR/engine-compat.json`."""

    def __init__(self, path: Path, cpu: str | None = None) -> None:
        self._path = path
        self._cpu = cpu if cpu is not None else cpu_fingerprint()
        self._known = self._load()

    def learned(self, binary: str) -> Learned | None:
        """What was learned about `binary` on this host, if anything."""
        return self._known.get(binary_key(binary, self._cpu))

    def extra_args(self, binary: str) -> list[str]:
        """Arguments to add to every start of `binary` on this host."""
        found = self.learned(binary)
        return list(found.args) if found else []

    def learn(self, binary: str, args: list[str], reason: str, now: datetime) -> bool:
        """Remember that `binary` needs `args` here; False when it was known already."""
        key = binary_key(binary, self._cpu)
        have = self._known.get(key)
        if have is not None and set(args) <= set(have.args):
            return False
        merged = tuple(dict.fromkeys([*(have.args if have else ()), *args]))
        self._known[key] = Learned(merged, reason, now.isoformat())
        self._save()
        return True

    def forget(self, binary: str) -> None:
        """Drop what was learned about `binary` (a probe found it runs as built)."""
        if self._known.pop(binary_key(binary, self._cpu), None) is not None:
            self._save()

    def _load(self) -> dict[str, Learned]:
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
            return {k: Learned(tuple(v["args"]), str(v["reason"]), str(v["learned_at"]))
                    for k, v in raw.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            # A damaged record costs one failed start to relearn, never a server that won't run.
            logger.warning("ignoring unreadable %s; engine flags are learned again", self._path)
            return {}

    def _save(self) -> None:
        data = {k: {"args": list(v.args), "reason": v.reason, "learned_at": v.learned_at}
                for k, v in self._known.items()}
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self._path)  # a crash mid-write leaves the old record, never half a file
