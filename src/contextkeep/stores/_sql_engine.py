"""How the SQL store reaches its database: async engines per dialect and one retried transaction per call.

Reads are single statements and run without a transaction (an autocommit pool
on servers), which saves two round trips each. SQLite allows one writer at a
time, so writes are queued on an in-process lock (cheaper than SQLite's
busy-wait) and start with `BEGIN IMMEDIATE` (no deadlock when another process
writes the same file). A transaction that failed transiently (deadlock victim,
serialization failure, locked file) is run again a few times.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from contextkeep._errors import StoreError

__all__ = ["Database", "async_url"]

_log = logging.getLogger("contextkeep.stores")
_T = TypeVar("_T")

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+aiomysql",
    "mariadb": "mysql+aiomysql",
}

# Milliseconds since the epoch on the database's own clock (leases must not depend on each
# instance's clock). MySQL's UTC_TIMESTAMP is independent of the session time zone.
_NOW_MS = {
    "sqlite": "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
    "postgresql": "CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)",
    "mysql": "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)",
}

_ATTEMPTS = 4
"""Tries for a transaction that failed transiently (deadlock victim, serialization failure)."""


def async_url(url: str | sa.URL) -> sa.URL:
    """`url` with its async driver: `postgresql://` → `postgresql+psycopg://`, and so on.

    MySQL/MariaDB URLs also get `charset=utf8mb4` so every code point survives.
    """
    parsed = sa.make_url(url)
    parsed = parsed.set(drivername=_ASYNC_DRIVERS.get(parsed.drivername, parsed.drivername))
    if parsed.get_backend_name() in ("mysql", "mariadb") and "charset" not in parsed.query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


class Database:
    """The engines for one SQL URL, and the transaction runner every store operation goes through.

    `display` names the database in errors and logs (password hidden).
    """

    def __init__(self, url: sa.URL, display: str) -> None:
        self.display = display
        """The URL as errors and logs show it."""
        async_at = async_url(url)
        self.dialect = "mysql" if async_at.get_backend_name() == "mariadb" else async_at.get_backend_name()
        """`sqlite`, `postgresql` or `mysql` (MySQL and MariaDB)."""
        self.sqlite_file: Path | None = None
        """The SQLite database file (None for a server or an in-memory database)."""
        self._memory = False
        kwargs: dict[str, Any] = {}
        if self.dialect == "sqlite":
            database = async_at.database or ""
            self._memory = database in ("", ":memory:")
            if self._memory:
                kwargs["poolclass"] = StaticPool  # one connection is the whole database
            else:
                self.sqlite_file = Path(database)
        self.engine = create_async_engine(async_at, pool_pre_ping=self.dialect != "sqlite", **kwargs)
        """The SQLAlchemy engine writes go through."""
        self._writer = self.engine.execution_options(contextkeep_write=True)
        # Every read is one statement, so it needs no transaction: a separate autocommit pool
        # saves the BEGIN/COMMIT round trips (SQLite reads simply skip BEGIN).
        self._reader = (
            self.engine
            if self.dialect == "sqlite"
            else create_async_engine(async_at, isolation_level="AUTOCOMMIT", **kwargs)
        )
        # SQLite: one writer at a time (and one connection in all for an in-memory database).
        self._sqlite_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        if self.dialect == "sqlite":
            _configure_sqlite(self.engine, wal=not self._memory)

    def now_ms(self) -> sa.ColumnElement[int]:
        """Milliseconds since the epoch on the database's clock, as a SQL expression."""
        return sa.literal_column(_NOW_MS[self.dialect], sa.BigInteger)

    async def run(self, op: str, work: Callable[[AsyncConnection], Awaitable[_T]], *, write: bool) -> _T:
        """Run `work` in one transaction, retrying transient failures; errors become StoreError.

        An `IntegrityError` (a lost compare-and-set) is raised as it is: it is an outcome.
        """
        engine = self._writer if write else self._reader
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                async with self._guard(write), engine.begin() as conn:
                    return await work(conn)
            except sa.exc.IntegrityError:
                raise  # a CAS outcome, not a failure
            except sa.exc.DBAPIError as exc:
                if attempt == _ATTEMPTS or not _transient(exc, write=write):
                    raise StoreError(f"{op} failed on {self.display}: {exc.orig!r}") from exc
                _log.warning(
                    "%s on %s failed transiently (%r); retry %d", op, self.display, exc.orig, attempt
                )
                await asyncio.sleep(random.uniform(0.005, 0.02) * attempt)  # de-synchronise the retriers
            except (sa.exc.SQLAlchemyError, OSError) as exc:
                raise StoreError(f"{op} failed on {self.display}: {exc!r}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def dispose(self) -> None:
        """Release every pooled connection."""
        await self.engine.dispose()
        await self._reader.dispose()

    def _guard(self, write: bool) -> AbstractAsyncContextManager[Any]:
        if self._sqlite_lock is not None and (write or self._memory):
            return self._sqlite_lock
        return contextlib.nullcontext()


def _transient(exc: sa.exc.DBAPIError, *, write: bool) -> bool:
    """A failure after which the same transaction may be retried safely and may succeed."""
    if exc.connection_invalidated:
        # A dropped connection may have lost the reply to a COMMIT: only reads are safe to repeat.
        return not write
    orig = exc.orig
    if getattr(orig, "sqlstate", None) in ("40001", "40P01"):  # PostgreSQL serialization / deadlock
        return True
    args = getattr(orig, "args", ())
    if args and args[0] in (1205, 1213):  # MySQL lock wait timeout / deadlock
        return True
    return "database is locked" in str(orig)


def _configure_sqlite(engine: AsyncEngine, *, wal: bool) -> None:
    """Let the store issue BEGIN itself (IMMEDIATE for writes), and wait rather than fail on a lock."""

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver must not BEGIN on its own
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout = 10000")
        if wal:  # readers do not block the writer; NORMAL is WAL's crash-safe sync level
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    def on_begin(conn: sa.Connection) -> None:
        # Writes take the write lock up front; reads are single statements, atomic without BEGIN.
        if conn.get_execution_options().get("contextkeep_write", False):
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    event.listen(engine.sync_engine, "connect", on_connect)
    event.listen(engine.sync_engine, "begin", on_begin)
