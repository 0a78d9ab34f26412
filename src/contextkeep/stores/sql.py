"""The SQL store: SQLite (the embedded default), PostgreSQL and MySQL/MariaDB, one code path.

Built on SQLAlchemy Core with async drivers (`aiosqlite`, `psycopg` 3,
`aiomysql`). Every write is a single compare-and-set transaction:

- **append** inserts rows at positions `expected_length ...`; the primary key
  `(conversation_id, position)` makes a concurrent append with the same
  expectation fail with a duplicate key, so it returns `False` and nothing of it
  is written. A gap (expecting more than is stored) is refused by checking that
  position `expected_length - 1` exists: rows are contiguous and never deleted,
  so that read cannot go stale.
- **save_document** is `UPDATE ... SET version = v + 1 WHERE version = v`
  (0 rows: stale), or an `INSERT` for version 0 that the primary key guards.
- **leases** are rows with an expiry compared against the *database* clock, so
  instances with skewed clocks agree: `UPDATE` when held by the same owner or
  expired, else `INSERT` (a duplicate key means someone else holds it). One
  mechanism for every dialect; PostgreSQL advisory locks would tie a lease to a
  connection, which a pooled async engine cannot keep.

Reads are single statements and run without a transaction (an autocommit pool
on servers), which saves two round trips each. SQLite allows one writer at a
time, so writes are queued on an in-process lock (cheaper than SQLite's
busy-wait) and start with `BEGIN IMMEDIATE` (no deadlock when another process
writes the same file).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from contextkeep.errors import ConfigError, StoreError
from contextkeep.messages import Message, message_from_dict, message_json
from contextkeep.stores._sql_schema import ID_LENGTH, KIND_LENGTH, make_tables, run_migrations
from contextkeep.stores.base import Document

__all__ = ["DEFAULT_TABLE_PREFIX", "SQLStore", "async_url"]

_log = logging.getLogger("contextkeep.stores")
_T = TypeVar("_T")

DEFAULT_TABLE_PREFIX = "ck_"
"""Prefix of every table name unless configured otherwise."""

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

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
"""Table prefixes: a plain identifier short enough for every dialect's name limit."""

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


def _dumps(value: Any) -> str:
    # Compact and non-ASCII kept: smaller rows; control characters are still escaped,
    # so a NUL in a message cannot upset PostgreSQL's TEXT.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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


def _check_length(what: str, value: str, limit: int) -> None:
    # SQLite ignores VARCHAR lengths; checking here keeps every dialect behaving alike.
    if len(value) > limit:
        raise StoreError(f"{what} is {len(value)} characters long; the SQL store accepts at most {limit}")


class SQLStore:
    """A :class:`~contextkeep.stores.base.Store` in SQLite, PostgreSQL or MySQL/MariaDB.

    `url` is a SQLAlchemy URL (`sqlite:///path.db`, `postgresql://user@host/db`,
    `mysql://root@host/db`; the async driver is filled in). Tables are named
    `{table_prefix}messages` etc. The schema is created on first use; an older
    schema is upgraded when `auto_migrate` is set, else :class:`SchemaVersionError`
    says to run `contextkeep migrate`.
    """

    def __init__(
        self,
        url: str | sa.URL,
        *,
        table_prefix: str = DEFAULT_TABLE_PREFIX,
        auto_migrate: bool = True,
    ) -> None:
        if not _PREFIX.fullmatch(table_prefix):
            raise ConfigError("store.table_prefix", f"{table_prefix!r} must match {_PREFIX.pattern}")
        given = sa.make_url(url)
        default = table_prefix == DEFAULT_TABLE_PREFIX
        shown = given if default else given.update_query_dict({"table_prefix": table_prefix})
        self._display = shown.render_as_string(hide_password=True)
        self._url = async_url(given)
        self._tables = make_tables(table_prefix)
        self._auto_migrate = auto_migrate
        self._dialect = "mysql" if self._url.get_backend_name() == "mariadb" else self._url.get_backend_name()
        self._sqlite_file: Path | None = None
        self._memory = False
        kwargs: dict[str, Any] = {}
        if self._dialect == "sqlite":
            database = self._url.database or ""
            self._memory = database in ("", ":memory:")
            if self._memory:
                kwargs["poolclass"] = StaticPool  # one connection is the whole database
            else:
                self._sqlite_file = Path(database)
        self._engine = create_async_engine(self._url, pool_pre_ping=self._dialect != "sqlite", **kwargs)
        self._writer = self._engine.execution_options(contextkeep_write=True)
        # Every read is one statement, so it needs no transaction: a separate autocommit pool
        # saves the BEGIN/COMMIT round trips (SQLite reads simply skip BEGIN).
        self._reader = (
            self._engine
            if self._dialect == "sqlite"
            else create_async_engine(self._url, isolation_level="AUTOCOMMIT", **kwargs)
        )
        # SQLite: one writer at a time (and one connection in all for an in-memory database).
        self._sqlite_lock = asyncio.Lock() if self._dialect == "sqlite" else None
        if self._dialect == "sqlite":
            _configure_sqlite(self._engine, wal=not self._memory)
        self._init_lock = asyncio.Lock()
        self._version: int | None = None

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine (for tools and tests)."""
        return self._engine

    @property
    def backend(self) -> str:
        """`sqlite`, `postgresql` or `mysql` (MySQL and MariaDB): labels failed saves."""
        return self._dialect

    @property
    def table_prefix(self) -> str:
        """The prefix of this store's table names."""
        return self._tables.schema_version.name.removesuffix("schema_version")

    def __repr__(self) -> str:
        return f"SQLStore({self._display!r})"

    # -- protocol -------------------------------------------------------------------------

    async def append(
        self, conversation_id: str, messages: Sequence[Message], *, expected_length: int
    ) -> bool:
        """Append `messages` if exactly `expected_length` are stored; `False` (nothing written) otherwise."""
        _check_length("conversation id", conversation_id, ID_LENGTH)
        if expected_length < 0:
            return False
        table = self._tables.messages
        rows = [
            {"conversation_id": conversation_id, "position": expected_length + i, "body": message_json(m)}
            for i, m in enumerate(messages)
        ]

        def at(position: int) -> sa.Select[Any]:
            return sa.select(sa.literal(1)).where(
                table.c.conversation_id == conversation_id, table.c.position == position
            )

        async def work(conn: AsyncConnection) -> bool:
            if expected_length > 0 and await conn.scalar(at(expected_length - 1)) is None:
                return False  # fewer stored than expected
            if not rows:
                return await conn.scalar(at(expected_length)) is None
            await conn.execute(sa.insert(table), rows)  # duplicate key: more stored than expected
            return True

        return await self._compare_and_set("append", work)

    async def load_messages(
        self, conversation_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Message]:
        """Messages from position `after` on (at most `limit`), in order."""
        if limit is not None and limit <= 0:
            return []
        table = self._tables.messages
        query = (
            sa.select(table.c.body)
            .where(table.c.conversation_id == conversation_id, table.c.position >= after)
            .order_by(table.c.position)
            .limit(limit)
        )

        async def work(conn: AsyncConnection) -> list[Message]:
            return [message_from_dict(json.loads(body)) for body in await conn.scalars(query)]

        return await self._transaction("load_messages", work, write=False)

    async def count_messages(self, conversation_id: str) -> int:
        """How many messages the transcript holds."""
        table = self._tables.messages
        query = sa.select(sa.func.count()).where(table.c.conversation_id == conversation_id)

        async def work(conn: AsyncConnection) -> int:
            return int(await conn.scalar(query) or 0)

        return await self._transaction("count_messages", work, write=False)

    async def load_document(self, conversation_id: str, kind: str, scope: str = "") -> Document:
        """The document, or an empty one with version 0."""
        table = self._tables.documents
        query = sa.select(table.c.version, table.c.body).where(
            *self._document_key(conversation_id, kind, scope)
        )

        async def work(conn: AsyncConnection) -> Document:
            row = (await conn.execute(query)).first()
            return Document({}, 0) if row is None else Document(json.loads(row.body), int(row.version))

        return await self._transaction("load_document", work, write=False)

    async def save_document(
        self,
        conversation_id: str,
        kind: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        scope: str = "",
    ) -> bool:
        """Save as version `expected_version + 1` if the stored one is `expected_version`, else `False`."""
        _check_length("conversation id", conversation_id, ID_LENGTH)
        _check_length("document kind", kind, KIND_LENGTH)
        _check_length("document scope", scope, ID_LENGTH)
        table = self._tables.documents
        body = _dumps(dict(data))

        async def work(conn: AsyncConnection) -> bool:
            if expected_version == 0:  # the primary key refuses a second first save
                row = {"conversation_id": conversation_id, "kind": kind, "scope": scope}
                await conn.execute(sa.insert(table).values(**row, version=1, body=body))
                return True
            result = await conn.execute(
                sa.update(table)
                .where(*self._document_key(conversation_id, kind, scope), table.c.version == expected_version)
                .values(version=expected_version + 1, body=body)
            )
            return result.rowcount == 1

        return await self._compare_and_set("save_document", work)

    async def list_scopes(self, conversation_id: str, kind: str) -> list[str]:
        """The scopes holding a saved document of `kind` for the conversation, sorted."""
        table = self._tables.documents
        key = (table.c.conversation_id == conversation_id, table.c.kind == kind)
        query = sa.select(table.c.scope).where(*key)

        async def work(conn: AsyncConnection) -> list[str]:
            return [str(scope) for scope in (await conn.scalars(query)).all()]

        # Sorted here, not in SQL: one order whatever the dialect's collation.
        return sorted(await self._transaction("list_scopes", work, write=False))

    async def acquire_lease(self, conversation_id: str, name: str, owner: str, ttl_ms: int) -> bool:
        """Take (or renew, for the same owner) a lease; an expired lease is taken over."""
        for what, value in (("conversation id", conversation_id), ("lease name", name), ("owner", owner)):
            _check_length(what, value, ID_LENGTH)
        table = self._tables.leases
        now = sa.literal_column(_NOW_MS[self._dialect], sa.BigInteger)
        until = now + sa.bindparam("ttl", ttl_ms, sa.BigInteger)
        key = (table.c.conversation_id == conversation_id, table.c.name == name)

        async def work(conn: AsyncConnection) -> bool:
            taken = await conn.execute(
                sa.update(table)
                .where(*key, sa.or_(table.c.owner == owner, table.c.expires_at <= now))
                .values(owner=owner, expires_at=until)
            )
            if taken.rowcount == 1:
                return True
            # No row, or a live one held by someone else: the primary key decides.
            row = {"conversation_id": conversation_id, "name": name, "owner": owner}
            await conn.execute(sa.insert(table).values(**row, expires_at=until))
            return True

        return await self._compare_and_set("acquire_lease", work)

    async def release_lease(self, conversation_id: str, name: str, owner: str) -> None:
        """Give a lease back (only its owner can)."""
        table = self._tables.leases
        query = sa.delete(table).where(
            table.c.conversation_id == conversation_id, table.c.name == name, table.c.owner == owner
        )

        async def work(conn: AsyncConnection) -> None:
            await conn.execute(query)

        await self._transaction("release_lease", work, write=True)

    async def list_conversations(self) -> list[str]:
        """Every conversation id with a transcript."""
        query = sa.select(self._tables.messages.c.conversation_id).distinct()

        async def work(conn: AsyncConnection) -> list[str]:
            # Sorted here: ORDER BY would follow each database's collation.
            return sorted(await conn.scalars(query))

        return await self._transaction("list_conversations", work, write=False)

    async def close(self) -> None:
        """Release connections."""
        await self._engine.dispose()
        await self._reader.dispose()

    # -- schema ---------------------------------------------------------------------------

    async def migrate(self) -> int:
        """Create or upgrade the schema whatever `auto_migrate` says; the schema version reached."""
        async with self._init_lock:
            self._version = await self._migrate(upgrade=True)
            return self._version

    async def drop_tables(self) -> None:
        """Drop this prefix's tables and everything in them (tests, benchmarks, resets)."""
        metadata = self._tables.metadata

        async def work(conn: AsyncConnection) -> None:
            await conn.run_sync(metadata.drop_all, checkfirst=True)

        async with self._init_lock:
            await self._attempt("drop_tables", work, write=True)
            self._version = None

    async def _migrate(self, *, upgrade: bool) -> int:
        if self._sqlite_file is not None:
            self._sqlite_file.parent.mkdir(parents=True, exist_ok=True)

        async def work(conn: AsyncConnection) -> int:
            return await run_migrations(conn, self._tables, upgrade=upgrade, store=self._display)

        version = await self._attempt("migrate", work, write=True)
        _log.debug("store %s at schema version %d", self._display, version)
        return version

    async def _ready(self) -> None:
        if self._version is None:
            async with self._init_lock:
                if self._version is None:
                    self._version = await self._migrate(upgrade=self._auto_migrate)

    # -- transactions ---------------------------------------------------------------------

    def _document_key(
        self, conversation_id: str, kind: str, scope: str
    ) -> tuple[sa.ColumnElement[bool], ...]:
        table = self._tables.documents
        return (table.c.conversation_id == conversation_id, table.c.kind == kind, table.c.scope == scope)

    async def _compare_and_set(self, op: str, work: Callable[[AsyncConnection], Awaitable[bool]]) -> bool:
        """Run a CAS write; a duplicate key means another writer got there first."""
        try:
            return await self._transaction(op, work, write=True)
        except sa.exc.IntegrityError:
            _log.debug("%s on %s lost a compare-and-set race", op, self._display)
            return False

    async def _transaction(
        self, op: str, work: Callable[[AsyncConnection], Awaitable[_T]], *, write: bool
    ) -> _T:
        await self._ready()
        return await self._attempt(op, work, write=write)

    async def _attempt(self, op: str, work: Callable[[AsyncConnection], Awaitable[_T]], *, write: bool) -> _T:
        """Run `work` in one transaction, retrying transient failures; errors become StoreError."""
        engine = self._writer if write else self._reader
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                async with self._guard(write), engine.begin() as conn:
                    return await work(conn)
            except sa.exc.IntegrityError:
                raise  # a CAS outcome, not a failure
            except sa.exc.DBAPIError as exc:
                if attempt == _ATTEMPTS or not _transient(exc, write=write):
                    raise StoreError(f"{op} failed on {self._display}: {exc.orig!r}") from exc
                _log.warning(
                    "%s on %s failed transiently (%r); retry %d", op, self._display, exc.orig, attempt
                )
                await asyncio.sleep(random.uniform(0.005, 0.02) * attempt)  # de-synchronise the retriers
            except (sa.exc.SQLAlchemyError, OSError) as exc:
                raise StoreError(f"{op} failed on {self._display}: {exc!r}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _guard(self, write: bool) -> AbstractAsyncContextManager[Any]:
        if self._sqlite_lock is not None and (write or self._memory):
            return self._sqlite_lock
        return contextlib.nullcontext()


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
