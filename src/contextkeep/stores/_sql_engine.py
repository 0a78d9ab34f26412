"""How the SQL store reaches its database: async engines per dialect and one retried transaction per call.

Reads are single statements and run without a transaction (an autocommit pool
on servers), which saves two round trips each. SQLite allows one writer at a
time, so writes are queued on an in-process lock (cheaper than SQLite's
busy-wait) and start with `BEGIN IMMEDIATE` (no deadlock when another process
writes the same file). A SQLite file is reached without aiosqlite's thread: its
transactions run inline in the event loop (`_sql_inline`), in WAL mode with
`synchronous=NORMAL`, so a commit never waits for the disk. A transaction that failed
transiently (deadlock victim,
serialization failure, locked file) is run again a few times. Every call is bounded by the
store's :class:`~contextkeep.stores._timeouts.Timeouts` (a call past its bound is not retried).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from contextkeep._errors import StoreError
from contextkeep.stores._sql_inline import DataVersion, InlineSQLite
from contextkeep.stores._timeouts import Expired, Timeouts, watch_checkouts, watchdog_of

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

    def __init__(self, url: sa.URL, display: str, timeouts: Timeouts | None = None) -> None:
        self.display = display
        """The URL as errors and logs show it."""
        self.timeouts = timeouts or Timeouts()
        """The bounds on each call."""
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
        else:
            kwargs["pool_timeout"] = self.timeouts.pool
            kwargs["connect_args"] = {"connect_timeout": max(1, math.ceil(self.timeouts.connect))}
        # No pre-ping: the checkout pings under the call's watchdog instead (see `_timeouts`).
        self.engine = create_async_engine(async_at, **kwargs)
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
        # A SQLite file: transactions run inline (`_sql_inline`); the async engine stays for tools.
        self._inline: InlineSQLite | None = None
        if self.dialect == "sqlite":
            busy_ms = int(self.timeouts.statement * 1000)
            _configure_sqlite(self.engine.sync_engine, wal=not self._memory, busy_ms=busy_ms)
            if self.sqlite_file is not None:
                # One connection, used from the loop's thread (whichever thread runs the loop).
                sync_url = async_url(url).set(drivername="sqlite+pysqlite")
                inline = sa.create_engine(sync_url, connect_args={"check_same_thread": False})
                event.listen(inline, "connect", self._forward_connect)
                _configure_sqlite(inline, wal=True, busy_ms=0)  # after them: no busy wait in the loop
                self._inline = InlineSQLite(inline)
        else:
            for engine in (self.engine, self._reader):
                watch_checkouts(engine, self.timeouts.statement)

    def _forward_connect(self, dbapi_connection: Any, record: Any) -> None:
        """`connect` listeners a tool attached to `engine` (pragmas) apply to the inline connections too."""
        self.engine.sync_engine.pool.dispatch.connect(dbapi_connection, record)

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
                if self._inline is not None:
                    return await self._inline.run(work, write=write, seconds=self.timeouts.statement)
                return await self._once(engine, work, write)
            except sa.exc.IntegrityError:
                raise  # a CAS outcome, not a failure
            except Expired as exc:
                raise StoreError(
                    f"{op} on {self.display} timed out: no answer within {exc.seconds:g} s ({exc.phase})"
                ) from exc.__cause__
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

    async def _once(
        self, engine: AsyncEngine, work: Callable[[AsyncConnection], Awaitable[_T]], write: bool
    ) -> _T:
        """One transaction within the timeouts; the checkout arms the connection's watchdog."""
        async with self._guard(write):
            conn = engine.connect()
            try:
                async with asyncio.timeout(self.timeouts.checkout):
                    await conn.start()
            except TimeoutError as exc:
                raise Expired("connect", self.timeouts.checkout) from exc
            watchdog = watchdog_of(conn)
            try:
                try:
                    async with conn.begin():
                        return await work(conn)
                finally:
                    await conn.close()  # back to the pool; after a watchdog shutdown, without a round trip
            except sa.exc.DBAPIError as exc:
                if watchdog is not None and watchdog.fired:
                    raise Expired("statement", self.timeouts.statement) from exc
                raise

    @property
    def data_version(self) -> Callable[[], DataVersion | None] | None:
        """Reads SQLite's data version on the connection transactions run on (a SQLite file only)."""
        return self._inline.data_version if self._inline is not None else None

    async def dispose(self) -> None:
        """Release every pooled connection."""
        await self.engine.dispose()
        await self._reader.dispose()
        if self._inline is not None:
            self._inline.dispose()

    @asynccontextmanager
    async def _guard(self, write: bool) -> AsyncIterator[None]:
        """SQLite's single writer (every call, in memory), waited for within the pool bound."""
        lock = self._sqlite_lock
        if lock is None or not (write or self._memory):
            yield
            return
        try:
            async with asyncio.timeout(self.timeouts.pool):
                await lock.acquire()
        except TimeoutError as exc:
            raise Expired("waiting for the writer", self.timeouts.pool) from exc
        try:
            yield
        finally:
            lock.release()


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


def _configure_sqlite(engine: sa.Engine, *, wal: bool, busy_ms: int) -> None:
    """Let the store issue BEGIN itself (IMMEDIATE for writes), and wait rather than fail on a lock."""

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the driver must not BEGIN on its own
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
        if wal:  # readers do not block the writer; NORMAL is WAL's crash-safe sync level
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    def on_begin(conn: sa.Connection) -> None:
        # Writes take the write lock up front; reads are single statements, atomic without BEGIN.
        if conn.get_execution_options().get("contextkeep_write", False):
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)
