"""Engine processes: they die with the server, stop when told, and leave their last words."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import psutil

from llmgw.node.process import spawn, tail, terminate
from tests.fakes.processes import eventually, fake_engine_argv, gone, kill_quietly

# A stand-in server: starts an engine with `spawn`, says its pid, then waits to be killed.
PARENT = """
import asyncio, sys
from pathlib import Path
from llmgw.node.process import spawn

async def main() -> None:
    engine = await spawn([sys.executable, "-c", "import time; time.sleep(60)"], Path(sys.argv[1]))
    sys.stdout.write(f"{engine.pid}\\n")
    sys.stdout.flush()
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_an_engine_dies_when_its_server_is_killed(tmp_path: Path) -> None:
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PARENT, str(tmp_path / "engine.log"), stdout=asyncio.subprocess.PIPE
    )
    engine_pid = None
    try:
        assert server.stdout is not None
        line = await asyncio.wait_for(server.stdout.readline(), timeout=20)
        assert line.strip().isdigit(), f"the stand-in server did not report an engine pid: {line!r}"
        engine_pid = int(line)
        assert psutil.Process(engine_pid).ppid() == server.pid

        server.kill()  # kill -9: no cleanup code of the server runs
        await server.wait()

        await eventually(lambda: gone(engine_pid), f"engine {engine_pid} dies with its server")
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
        if engine_pid is not None:
            kill_quietly(engine_pid)


async def test_terminate_stops_an_engine_with_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    proc = await spawn([sys.executable, "-c", "import time; time.sleep(60)"], log)

    code = await asyncio.wait_for(terminate(proc, grace_s=10), timeout=5)

    assert code == -signal.SIGTERM
    assert gone(proc.pid)


async def test_terminate_kills_an_engine_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    proc = await spawn(fake_engine_argv(0, "hang-on-term"), log)
    try:
        # The fake engine announces itself once it ignores SIGTERM.
        await eventually(lambda: log.exists() and "fake engine pid" in log.read_text(), "the engine starts")

        code = await asyncio.wait_for(terminate(proc, grace_s=0.3), timeout=5)

        assert code == -signal.SIGKILL
        assert gone(proc.pid)
    finally:
        kill_quietly(proc.pid)
        await proc.wait()


async def test_terminate_of_an_engine_that_already_exited_returns_its_code(tmp_path: Path) -> None:
    proc = await spawn([sys.executable, "-c", "raise SystemExit(7)"], tmp_path / "engine.log")
    await proc.wait()
    assert await terminate(proc, grace_s=10) == 7


async def test_engine_output_is_appended_to_its_log_across_starts(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "rep-1.log"
    for word in ("first", "second"):
        code = f"import sys; print('{word} out'); sys.stderr.write('{word} err\\n')"
        proc = await spawn([sys.executable, "-c", code], log)
        await proc.wait()

    assert tail(log).splitlines() == ["first out", "first err", "second out", "second err"]


def test_tail_gives_the_last_five_non_blank_lines(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("".join(f"line {i}\n\n" for i in range(10)))
    assert tail(log).splitlines() == [f"line {i}" for i in range(5, 10)]


def test_tail_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert tail(tmp_path / "never-written.log") == ""


def test_tail_survives_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_bytes(b"loading \xff\xfe model\nfatal: out of memory\n")
    assert tail(log).splitlines()[-1] == "fatal: out of memory"
