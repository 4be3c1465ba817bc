"""The test suite never reads or writes the user's install, whatever the environment holds.

A user who ran `scripts/up.sh` may have `LLMGW_DATA_DIR`, `LLMGW_ADMIN_KEY`, `LLMGW_URL` or
`LLMGW_CTL_CONFIG` exported, a `~/.config/llmgw/ctl.toml` and a `~/.local/share/llmgw`: a test's
`server init` or `ctl` call must use the test's own directory and key, never those. `clean_env()`
is the one place that decides what of the caller's environment reaches an llmgw process the
suite starts (every helper that spawns one builds its environment from it), and tests/conftest.py
applies it to the test process itself for the in-process CLI runs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

# The LLMGW_* variables the test infrastructure reads (scripts/common.sh exports them):
# where a tool the tests drive is, not anything of the user's install.
INFRASTRUCTURE = frozenset({
    "LLMGW_PG_BIN",         # tests/support/pg.py: PostgreSQL's initdb and pg_ctl
    "LLMGW_CHROMIUM",       # tests/support/browser.py: the browser of the console's tests
    "LLMGW_CHROMEDRIVER",   # tests/support/browser.py: its driver
    "LLMGW_MERMAID_JS",     # docsgen/hooks.py: the docs' diagram renderer
    "LLMGW_REDIS_SERVER",   # tests/support/redis_server.py: the shared limits' Redis
    "LLMGW_LLAMA_SERVER",   # the engine binary the end-to-end tests run
})
# Prefixes of the variables that configure the user's own install or account: dropped.
USERS = ("LLMGW_", "HF_", "HUGGING_FACE_")
# Where a user's tools keep their files: pointed into the suite's own home.
XDG_HOMES = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_CACHE_HOME": ".cache",
    "XDG_STATE_HOME": ".local/state",
    "XDG_RUNTIME_DIR": "run",
}

_home: Path | None = None


def use_home(home: Path) -> None:
    """Make `home` the suite's HOME (the session fixture gives one under pytest's base temp)."""
    global _home
    _home = home


def suite_home() -> Path:
    """The HOME every llmgw process of the suite gets: the session's, else a fresh temp dir."""
    global _home
    if _home is None:
        _home = Path(tempfile.mkdtemp(prefix="llmgw-tests-home-"))
    return _home


def _users(name: str) -> bool:
    return name.startswith(USERS) and name not in INFRASTRUCTURE


def clean_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`environ` (default `os.environ`) without the user's llmgw and Hub settings, with HOME and
    the XDG directories in the suite's own home (created, owner-only). PATH, PYTHONPATH, TMPDIR
    and the INFRASTRUCTURE variables pass through; a test adds its own values on top."""
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items() if not _users(k)}
    home = suite_home()
    env["HOME"] = str(home)
    for var, sub in XDG_HOMES.items():
        path = home / sub
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        env[var] = str(path)
    return env


def isolate_this_process() -> dict[str, str]:
    """Apply clean_env() to os.environ; returns what was there, to restore."""
    before = dict(os.environ)
    after = clean_env(before)
    os.environ.clear()
    os.environ.update(after)
    return before
