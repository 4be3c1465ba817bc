"""A throwaway PostgreSQL cluster for tests: the real server, started once per test session.

`postgres_url` is a session fixture (a conftest re-exports it) yielding the SQLAlchemy URL of a
database owned by a password-protected `llmgw` role; `fresh_database(url)` makes an empty
database per test so tests never share schema state. The server is stopped (`pg_ctl stop -m
fast`) and its files removed at the end of the session. Outage tests start a cluster of their
own (`start_cluster`), `stop()` it and `start_again()` it on the same port.

The server binaries come from `$LLMGW_PG_BIN`, PATH, or `/usr/lib/postgresql/*/bin`;
`scripts/test.sh` installs them when they are missing.

Under root the cluster belongs to the `postgres` system user (initdb and the server refuse to
run as root). That user cannot enter pytest's temp dirs (0700, and any pytest session that
starts resets their root to 0700), so the cluster lives in its own temp dir instead, at a path
that repeats pytest's base temp dir: the suite's leaked-process check, which looks for that
path in command lines, still sees a server that outlives the session.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

PG_BIN_ENV = "LLMGW_PG_BIN"
PG_USER = "postgres"  # the superuser role, and the system user the server runs as under root
ROLE = "llmgw"
DATABASE = "llmgw"
MISSING = (
    f"PostgreSQL server binaries (initdb, pg_ctl) were not found in ${PG_BIN_ENV}, on PATH or in "
    "/usr/lib/postgresql/*/bin: run scripts/test.sh, which installs them (as root, with apt-get)"
)


def find_pg_bin() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres, or None."""
    candidates: list[Path] = []
    if os.environ.get(PG_BIN_ENV):
        candidates.append(Path(os.environ[PG_BIN_ENV]))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    versions.sort(key=lambda d: [int(p) if p.isdigit() else 0 for p in Path(d).parent.name.split(".")])
    candidates += [Path(d) for d in reversed(versions)]  # the newest first
    for directory in candidates:
        if all(os.access(directory / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _as_root() -> bool:
    return os.geteuid() == 0


def _ensure_system_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", PG_USER],
            check=True, capture_output=True, text=True,
        )
        return pwd.getpwnam(PG_USER)


def _run_as(user: str, cmd: Sequence[str]) -> list[str]:
    if shutil.which("runuser"):
        return ["runuser", "-u", user, "--", *cmd]
    return ["su", "-s", "/bin/sh", user, "-c", shlex.join(cmd)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class PostgresCluster:
    """One initdb'd cluster; `start()` runs it on a free port on 127.0.0.1 and a private socket."""

    bin_dir: Path
    root: Path  # everything the cluster writes lives here, owned by the server's user
    label: str = ""  # the data directory is root/<label>/data
    port: int = 0
    password: str = ""

    @property
    def data(self) -> Path:
        return self.root / self.label.strip("/") / "data"

    @property
    def sockets(self) -> Path:
        return self.root / "sock"  # short: a socket's path is limited to 107 bytes

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the `llmgw` database as the `llmgw` role, over TCP."""
        return f"postgresql+psycopg://{ROLE}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, *argv: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a server tool as the cluster's user (the `postgres` system user under root)."""
        cmd = [str(self.bin_dir / str(argv[0])), *map(str, argv[1:])]
        if _as_root():
            cmd = _run_as(PG_USER, cmd)
        proc = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            tail = ""
            if self.log.exists():
                tail = "\n--- server log ---\n" + self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"{shlex.join(cmd)} exited with {proc.returncode}:\n{proc.stdout}{proc.stderr}{tail}"
            )
        return proc

    def init(self) -> None:
        self.data.parent.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(exist_ok=True)
        if _as_root():
            user = _ensure_system_user()
            for directory in [self.root, *self.root.rglob("*")]:
                os.chown(directory, user.pw_uid, user.pw_gid)
        # Local (socket) connections trust the superuser; TCP needs a password, like production.
        self._run("initdb", "-D", self.data, "-U", PG_USER, "--auth-local=trust",
                  "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-locale", "--no-sync")

    def _pg_ctl_start(self, check: bool) -> subprocess.CompletedProcess[str]:
        # A throwaway cluster: durability off for speed; what the tests see is unchanged.
        options = (f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        return self._run("pg_ctl", "-D", self.data, "-l", self.log, "-o", options, "-w", "-t", "60",
                         "start", check=check)

    def start(self, attempts: int = 3) -> None:
        for attempt in range(attempts):
            self.port = free_port()
            proc = self._pg_ctl_start(check=attempt == attempts - 1)
            if proc.returncode == 0:
                return
            self.stop()  # the port was taken in the meantime: leave nothing behind and retry

    def start_again(self) -> None:
        """Start a stopped cluster on the port it had, so the URLs handed out work again
        (outage tests: `stop()`, then this)."""
        assert self.port, "start_again() restarts a cluster that was started before"
        self._pg_ctl_start(check=True)

    @property
    def running(self) -> bool:
        pid = self.postmaster_pid()
        return pid is not None and _alive(pid)

    def superuser(self, dbname: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        """A connection as the superuser over the cluster's own socket."""
        return psycopg.connect(host=str(self.sockets), port=self.port, user=PG_USER, dbname=dbname,
                               autocommit=True)

    def create_role_and_database(self) -> None:
        self.password = secrets.token_hex(16)
        with self.superuser() as conn:
            conn.execute(f"CREATE ROLE {ROLE} LOGIN CREATEDB PASSWORD '{self.password}'")
            # Owning the database owns its `public` schema (PostgreSQL 15 no longer lets every
            # role create tables there).
            conn.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """`pg_ctl stop -m fast`; if that fails, signal the postmaster until it is gone."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "60", "stop", check=False)
        for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGKILL, None):  # fast, immediate, kill
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _alive(pid):
                return
            if sig is not None:
                os.kill(pid, sig)
        raise RuntimeError(f"the PostgreSQL server (pid {pid}) did not stop")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def require_pg_bin() -> Path:
    """The server binaries' directory; fails the test (never skips) when there are none."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        pytest.fail(MISSING, pytrace=False)
    return bin_dir


def start_cluster(root: Path, label: str = "") -> PostgresCluster:
    """Create and start a cluster in `root`."""
    cluster = PostgresCluster(bin_dir=require_pg_bin(), root=root, label=label)
    try:
        cluster.init()
        cluster.start()
        cluster.create_role_and_database()
    except BaseException:
        cluster.stop()
        cluster.remove()
        raise
    return cluster


def fresh_database(url: str) -> str:
    """Create a new, empty database on the server `url` points at; return its URL."""
    parsed = make_url(url)
    name = f"t_{secrets.token_hex(8)}"
    with psycopg.connect(host=parsed.host, port=parsed.port, user=parsed.username,
                         password=parsed.password, dbname=parsed.database, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return parsed.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL server for the session: the URL of an `llmgw`-owned database."""
    require_pg_bin()
    root = Path(tempfile.mkdtemp(prefix="llmgw-pg-"))
    cluster = start_cluster(root, label=str(tmp_path_factory.getbasetemp()))
    try:
        yield cluster.url
    finally:
        try:
            cluster.stop()
        finally:
            cluster.remove()
