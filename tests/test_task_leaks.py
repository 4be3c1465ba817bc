"""The suite's check on asyncio tasks (`no_task_outlives_its_test` in tests/conftest.py): an
async test that leaves a task running fails, naming the task; one that cancels its tasks passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The suite's check and the hook that puts it first on every async test, and nothing else of
# the root conftest (its session fixtures watch the outer run).
CONFTEST = """from tests.conftest import no_task_outlives_its_test, pytest_collection_modifyitems

__all__ = ["no_task_outlives_its_test", "pytest_collection_modifyitems"]
"""

PROBE = '''import asyncio


async def test_forgets_a_task() -> None:
    asyncio.get_running_loop().create_task(asyncio.Event().wait(), name="forgotten-poller")


async def test_cancels_its_task() -> None:
    task = asyncio.create_task(asyncio.Event().wait(), name="owned-poller")
    task.cancel()
'''


def test_an_async_test_that_leaves_a_task_running_fails_naming_it(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_probe.py").write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-p", "no:randomly",
         "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "inner"),
         # The suite's own asyncio settings (pyproject.toml), for the probe's rootdir has none.
         "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function",
         str(tmp_path / "test_probe.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    # Both bodies pass; the leaking test's teardown fails it.
    assert "2 passed, 1 error" in out, out[-3000:]
    assert "ERROR at teardown of test_forgets_a_task" in out, out[-3000:]
    assert "the test left 1 task(s) running: forgotten-poller" in out, out[-3000:]
    assert "owned-poller" not in out
