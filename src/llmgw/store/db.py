"""Opening the database, running migrations, and the revision counter."""

from __future__ import annotations

import logging
import os
import re
import stat
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, inspect, select, update
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

from llmgw.core.errors import ConfigError, StoreUnavailable
from llmgw.store.schema import meta

logger = logging.getLogger(__name__)


def open_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL and a busy timeout so the loops and API can share it."""
    # A database host that does not answer fails a connection in 5 s rather than the OS's
    # minutes: the leader must be able to give up on renewing its lease before it expires.
    connect_args = {"connect_timeout": 5} if url.startswith("postgresql") else {}
    try:
        # hide_parameters: a failed statement's error (logged by whoever catches it) must not
        # carry its bound values, among them key hashes, names and notes.
        engine = create_engine(url, future=True, pool_pre_ping=True, connect_args=connect_args,
                               hide_parameters=True)
    except (SQLAlchemyError, ValueError, ImportError) as exc:
        raise ConfigError(f"cannot open database {redact(url)}: {exc}") from exc
    where = redact(url)
    sqlite = engine.dialect.name == "sqlite"
    if sqlite and engine.url.database not in (None, "", ":memory:"):
        _owner_only(Path(engine.url.database))

    @event.listens_for(engine, "handle_error")
    def _unavailable(ctx: ExceptionContext) -> BaseException | None:
        # Translated here, at the boundary: every caller sees one retryable error, and loops
        # log it as one line instead of a driver traceback each retry. Pre-ping failures stay
        # SQLAlchemy's own: the pool handles them by reconnecting. SQLite reports faults in a
        # statement as OperationalError too, so there only a lock held too long counts.
        if ctx.is_pre_ping or not (ctx.is_disconnect or unavailable(ctx.sqlalchemy_exception)):
            return None
        if sqlite and "database is locked" not in str(ctx.original_exception):
            return None
        first = str(ctx.original_exception).strip().splitlines()[0][:200]
        return StoreUnavailable(f"the database {where} is unavailable: {first}")

    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

    return engine


# libpq also takes the password as a query parameter (`?password=…`).
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&]*", re.IGNORECASE)
def _owner_only(path: Path) -> None:
    """Create the SQLite file mode 0600 (it holds the engine key and the key hashes), or make an
    existing one so. SQLite creates `-wal` and `-shm` with the database file's mode; ones left
    by an earlier version are fixed here too."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(f"cannot create database {path}: {exc.strerror}") from exc
    else:
        os.close(fd)
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            if stat.S_IMODE(p.stat().st_mode) & 0o077:
                p.chmod(0o600)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(f"cannot make {p} private to its owner: {exc.strerror}") from exc


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    url = _QUERY_PASSWORD.sub(r"\1***", url)
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


def schema_config() -> Config:
    """Alembic's configuration for llmgw's migrations (the caller sets its `connection`)."""
    cfg = Config(str(resources.files("llmgw.store") / "alembic.ini"))
    cfg.set_main_option("script_location", str(resources.files("llmgw.store") / "migrations"))
    return cfg


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest migration; a failure stops startup with the reason."""
    cfg = schema_config()
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    except StoreUnavailable as exc:
        raise ConfigError(f"database migration failed: {exc.message}") from exc
    except SQLAlchemyError as exc:
        raise ConfigError(f"database migration failed on {engine.url}: {reason(exc)}") from exc


def schema_exists(url: str) -> bool:
    """Whether the database at `url` already has llmgw's tables."""
    engine = open_engine(url)
    try:
        return inspect(engine).has_table("meta")
    except StoreUnavailable as exc:
        raise ConfigError(f"cannot open database: {exc.message}") from exc
    except SQLAlchemyError as exc:
        raise ConfigError(f"cannot open database {redact(url)}: {reason(exc)}") from exc
    finally:
        engine.dispose()


def bump_revision(conn: Connection) -> None:
    """Mark a change in the same transaction as the change itself."""
    conn.execute(update(meta).where(meta.c.key == "revision").values(value=meta.c.value + 1))


def read_revision(engine: Engine) -> int:
    """The current revision; raises StoreUnavailable when the database cannot be read."""
    try:
        with engine.connect() as conn:
            value = conn.execute(select(meta.c.value).where(meta.c.key == "revision")).scalar_one()
    except SQLAlchemyError as exc:
        raise StoreUnavailable("the database is unavailable") from exc
    return int(value)


def unavailable(exc: BaseException | None) -> bool:
    """True when `exc` says the database cannot be reached (down, restarting, connection
    lost), as opposed to a fault in the statement or the data."""
    return isinstance(exc, OperationalError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )


def utc(value: datetime | None) -> datetime | None:
    """Everything llmgw stores is UTC: SQLite hands back naive datetimes, PostgreSQL ones in the
    session's time zone."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def reason(exc: BaseException) -> str:
    """A driver error as one line: its own message, without SQLAlchemy's background link."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())
