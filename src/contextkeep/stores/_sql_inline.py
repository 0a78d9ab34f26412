"""SQLite files without a thread hop: each transaction runs at once, in the event loop's thread.

aiosqlite runs every driver call on a thread of its own and hands the result back to the
loop: a few handoffs per statement, each a thread wake-up, which cost 4–8 ms per store call on
a busy machine, against tens of microseconds for the statement itself. A local file in WAL
mode with `synchronous=NORMAL` never waits for the disk on commit, so the store runs SQLite's
transactions synchronously instead, through :class:`InlineConnection` (the async interface the
store's transactions are written against, over a plain SQLAlchemy connection).

The one thing that could block the loop is another process holding the write lock. So these
connections do not wait in SQLite's busy handler (`busy_timeout = 0`): a busy database fails
the attempt at once (before anything was written), and :meth:`InlineSQLite.run` retries it
after an asynchronous backoff until the statement timeout has passed.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from contextkeep.stores._timeouts import Expired

__all__ = ["PREBUILT", "DataVersion", "InlineConnection", "InlineSQLite", "is_busy"]

_T = TypeVar("_T")
_FIRST_BACKOFF_S = 0.001
_MAX_BACKOFF_S = 0.05


DataVersion = tuple[int, int]
"""Which connection, and SQLite's `PRAGMA data_version` on it."""

PREBUILT = "contextkeep_prebuilt"
"""Execution option marking a statement built once per store: run through the raw cursor here."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]
    defaults: Mapping[str, Any]  # bound values the statement carries itself (literals)


class _Result:
    """What the store reads from a result: `first()`, `rowcount`, and the first column."""

    def __init__(self, cursor: Any) -> None:
        self.rowcount: int = cursor.rowcount
        self._names = [d[0] for d in cursor.description or ()]
        self._rows: list[tuple[Any, ...]] = cursor.fetchall()
        self.first_column = [row[0] for row in self._rows]

    def first(self) -> Any:
        """The first row, its columns as attributes; None when there is none."""
        return SimpleNamespace(**dict(zip(self._names, self._rows[0], strict=True))) if self._rows else None


class InlineConnection:
    """The part of `AsyncConnection` the store uses, over a synchronous connection: nothing suspends.

    Statements marked :data:`PREBUILT` are compiled once and run on the sqlite3 cursor itself:
    SQLAlchemy's execution path costs ten times the statement on a local file.
    """

    def __init__(self, conn: sa.Connection, compiled: dict[object, _Compiled]) -> None:
        self.sync_connection = conn
        self.dialect = conn.dialect
        self._compiled = compiled

    async def execute(self, statement: Any, parameters: Any = None) -> Any:
        if _prebuilt(statement):
            return self._raw(statement, parameters)
        return self.sync_connection.execute(statement, parameters)

    async def scalar(self, statement: Any, parameters: Any = None) -> Any:
        if _prebuilt(statement):
            values = self._raw(statement, parameters).first_column
            return values[0] if values else None
        return self.sync_connection.scalar(statement, parameters)

    async def scalars(self, statement: Any, parameters: Any = None) -> Any:
        if _prebuilt(statement):
            return self._raw(statement, parameters).first_column
        return self.sync_connection.scalars(statement, parameters)

    async def run_sync(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        return fn(self.sync_connection, *args, **kwargs)

    def _raw(self, statement: Any, parameters: Any) -> _Result:
        many = isinstance(parameters, list)
        rows: list[Mapping[str, Any]] = parameters if many else [parameters or {}]
        compiled = self._compiled.get(statement)
        if compiled is None:
            done = statement.compile(dialect=self.dialect, column_keys=list(rows[0]) if many else None)
            compiled = _Compiled(
                done.string, tuple(done.positiontup or ()), done.construct_params(dict(rows[0]))
            )
            self._compiled[statement] = compiled
        values = [tuple({**compiled.defaults, **row}[n] for n in compiled.names) for row in rows]
        dbapi = self.sync_connection.connection.dbapi_connection
        assert dbapi is not None  # a connection inside a transaction
        cursor = dbapi.cursor()
        try:
            if many:
                cursor.executemany(compiled.sql, values)
            else:
                cursor.execute(compiled.sql, values[0])
            return _Result(cursor)
        except sqlite3.Error as exc:  # as SQLAlchemy would raise it: a duplicate key is an IntegrityError
            raise sa.exc.DBAPIError.instance(compiled.sql, values, exc, sqlite3.Error) from exc
        finally:
            cursor.close()


def _prebuilt(statement: Any) -> bool:
    options = getattr(statement, "get_execution_options", None)
    return bool(options is not None and options().get(PREBUILT))


def is_busy(exc: BaseException) -> bool:
    """Whether `exc` is SQLite's "database is locked" (another connection holds the write lock)."""
    return isinstance(exc, sa.exc.OperationalError) and "database is locked" in str(exc.orig)


class InlineSQLite:
    """One SQLite file reached inline: a single connection, kept open, for reads and writes alike.

    The loop runs one transaction at a time on it (a transaction never suspends), so one
    connection serves every call of the process without a pool checkout per call.
    """

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._conn: sa.Connection | None = None
        self._compiled: dict[object, _Compiled] = {}
        self._connections = 0  # connections opened: a data version means nothing on another one

    def _connection(self) -> sa.Connection:
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._conn = self._engine.connect()
            self._connections += 1
        return self._conn

    async def run(
        self, work: Callable[[AsyncConnection], Awaitable[_T]], *, write: bool, seconds: float
    ) -> _T:
        """`work` in one transaction (`BEGIN IMMEDIATE` for a write).

        A busy database is retried after an asynchronous backoff for up to `seconds`.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        backoff = _FIRST_BACKOFF_S
        while True:
            conn = self._connection().execution_options(contextkeep_write=write)
            inline = cast(AsyncConnection, InlineConnection(conn, self._compiled))
            try:
                if not write:  # one statement, atomic on its own: no transaction to manage
                    try:
                        return await work(inline)
                    finally:
                        if conn.in_transaction():  # begun by a statement not prebuilt
                            conn.rollback()
                with conn.begin():
                    return await work(inline)
            except sa.exc.OperationalError as exc:
                if not is_busy(exc):
                    raise
                if loop.time() + backoff > deadline:
                    raise Expired("waiting for the database lock", seconds) from exc
            await asyncio.sleep(random.uniform(backoff / 2, backoff))  # jitter: writers do not retry in step
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def data_version(self) -> DataVersion | None:
        """The connection and its `PRAGMA data_version`, which changes when another connection commits.

        Read within the transaction running, if any; `None` when it cannot be read.
        """
        try:
            dbapi = self._connection().connection.dbapi_connection
            assert dbapi is not None  # a connection just checked out
            return self._connections, int(dbapi.execute("PRAGMA data_version").fetchone()[0])
        except (sa.exc.SQLAlchemyError, sqlite3.Error):
            return None

    def dispose(self) -> None:
        """Close the connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._engine.dispose()
