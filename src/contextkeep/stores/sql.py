"""The SQL store: SQLite (the embedded default), PostgreSQL and MySQL/MariaDB, one code path.

Built on SQLAlchemy Core with async drivers (`aiosqlite`, `psycopg` 3,
`aiomysql`). Every write is a single compare-and-set transaction:

- **append** inserts rows at positions `expected_length ...`; the primary key
  `(conversation_id, position)` makes a concurrent append with the same
  expectation fail with a duplicate key, so it returns `False` and nothing of it
  is written. A gap (expecting more than is stored) is refused by checking that
  position `expected_length - 1` exists: rows are contiguous and never deleted,
  so that read cannot go stale. A retry of a batch whose commit went through
  but whose reply was lost finds itself stored there and succeeds (`_idempotent`).
- **save_document** is `UPDATE ... SET version = v + 1 WHERE version = v`
  (0 rows: stale), or an `INSERT` for version 0 that the primary key guards.
- **append_and_save** runs both in one transaction, rolled back unless both held
  (the statements of each write are in `_sql_writes.py`).
- **leases** are rows with an expiry compared against the *database* clock, so
  instances with skewed clocks agree: `UPDATE` when held by the same owner or
  expired, else `INSERT` (a duplicate key means someone else holds it). One
  mechanism for every dialect; PostgreSQL advisory locks would tie a lease to a
  connection, which a pooled async engine cannot keep.

How each transaction reaches the database (pools, SQLite's single writer,
retried transient failures) lives beside it, in `_sql_engine.py`. On a SQLite file, a
read that would find only what this store wrote itself is answered without a query
(`_sql_known.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from contextkeep._errors import ConfigError, StoreError
from contextkeep._messages import Message, message_from_dict
from contextkeep.stores._idempotent import already_stored
from contextkeep.stores._sql_engine import Database, async_url
from contextkeep.stores._sql_known import Known, Touched
from contextkeep.stores._sql_schema import ID_LENGTH, make_tables, run_migrations
from contextkeep.stores._sql_statements import Statements
from contextkeep.stores._sql_writes import Stale, Work, appending, check_length, saving
from contextkeep.stores._timeouts import DEFAULT_TIMEOUTS, Timeouts
from contextkeep.stores.base import Document, DocumentWrite

__all__ = ["DEFAULT_TABLE_PREFIX", "SQLStore", "async_url"]

_log = logging.getLogger("contextkeep.stores")
_T = TypeVar("_T")

DEFAULT_TABLE_PREFIX = "ck_"
"""Prefix of every table name unless configured otherwise."""

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
"""Table prefixes: a plain identifier short enough for every dialect's name limit."""


class SQLStore:
    """A :class:`~contextkeep.stores.base.Store` in SQLite, PostgreSQL or MySQL/MariaDB.

    `url` is a SQLAlchemy URL (`sqlite:///path.db`, `postgresql://user@host/db`,
    `mysql://root@host/db`; the async driver is filled in). Tables are named
    `{table_prefix}messages` etc. The schema is created on first use; an older
    schema is upgraded when `auto_migrate` is set, else :class:`SchemaVersionError`
    says to run `contextkeep migrate`.

    Every call is bounded (seconds; URL parameters of the same names through
    :func:`~contextkeep.stores.open_store`): `connect_timeout` to open a connection,
    `statement_timeout` for the call's statements and commit, `pool_timeout` to wait for a
    pooled connection (an in-memory SQLite database: for its one connection; a SQLite file's
    lock held by another process is waited for up to `statement_timeout`). Past its bound a
    call raises `StoreError` naming the store, the operation and the phase; the store stays
    usable and reconnects.
    """

    def __init__(
        self,
        url: str | sa.URL,
        *,
        table_prefix: str = DEFAULT_TABLE_PREFIX,
        auto_migrate: bool = True,
        connect_timeout: float = DEFAULT_TIMEOUTS.connect,
        statement_timeout: float = DEFAULT_TIMEOUTS.statement,
        pool_timeout: float = DEFAULT_TIMEOUTS.pool,
    ) -> None:
        if not _PREFIX.fullmatch(table_prefix):
            raise ConfigError("store.table_prefix", f"{table_prefix!r} must match {_PREFIX.pattern}")
        given = sa.make_url(url)
        default = table_prefix == DEFAULT_TABLE_PREFIX
        shown = given if default else given.update_query_dict({"table_prefix": table_prefix})
        self._display = shown.render_as_string(hide_password=True)
        self._db = Database(given, self._display, Timeouts(connect_timeout, statement_timeout, pool_timeout))
        self._tables = make_tables(table_prefix)
        self._statements = Statements.of(self._tables)
        self._auto_migrate = auto_migrate
        self._init_lock = asyncio.Lock()
        self._version: int | None = None
        # A SQLite file: reads that would find only this store's own writes are answered without a query.
        reader = self._db.data_version
        self._known = Known(reader) if reader is not None else None

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine (for tools and tests)."""
        return self._db.engine

    @property
    def backend(self) -> str:
        """`sqlite`, `postgresql` or `mysql` (MySQL and MariaDB): labels failed saves."""
        return self._db.dialect

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
        work, touched = appending(self._statements, conversation_id, messages, expected_length)
        if expected_length < 0:
            return False
        if await self._compare_and_set("append", work, touched):
            return True
        return await already_stored(self, conversation_id, messages, expected_length)

    async def append_and_save(
        self,
        conversation_id: str,
        messages: Sequence[Message],
        *,
        expected_length: int,
        document: DocumentWrite,
    ) -> bool:
        """`append` and `save_document(document)` in one transaction: both, or neither and `False`."""
        append, appended = appending(self._statements, conversation_id, messages, expected_length)
        save, saved = saving(self._statements, conversation_id, document)
        if expected_length < 0:
            return False

        async def work(conn: AsyncConnection) -> bool:
            if not (await append(conn) and await save(conn)):
                raise Stale  # rolls the transaction back: nothing of it is written
            return True

        try:
            return await self._compare_and_set(
                "append_and_save", work, Touched(appended.length, saved.document)
            )
        except Stale:
            return False

    async def load_messages(
        self, conversation_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Message]:
        """Messages from position `after` on (at most `limit`), in order."""
        if limit is not None and limit <= 0:
            return []
        st = self._statements
        query = st.messages_from if limit is None else st.messages_from_limited
        params = {"c": conversation_id, "p": after, "n": limit}

        async def work(conn: AsyncConnection) -> list[Message]:
            return [message_from_dict(json.loads(body)) for body in await conn.scalars(query, params)]

        known, at = self._facts()
        length = known.length(conversation_id) if known is not None else None
        if length is not None and after >= length:
            return []  # nothing after what this store knows is there
        messages = await self._transaction("load_messages", work, write=False)
        if known is not None and limit is None and (after == 0 or messages):
            known.learn_length(conversation_id, after + len(messages), at)
        return messages

    async def count_messages(self, conversation_id: str) -> int:
        """How many messages the transcript holds."""

        async def work(conn: AsyncConnection) -> int:
            return int(await conn.scalar(self._statements.count_messages, {"c": conversation_id}) or 0)

        return await self._transaction("count_messages", work, write=False)

    async def load_document(self, conversation_id: str, kind: str, scope: str = "") -> Document:
        """The document, or an empty one with version 0."""
        key = {"c": conversation_id, "k": kind, "s": scope}

        async def work(conn: AsyncConnection) -> Document:
            row = (await conn.execute(self._statements.document, key)).first()
            return Document({}, 0) if row is None else Document(json.loads(row.body), int(row.version))

        known, at = self._facts()
        cached = known.document((conversation_id, kind, scope)) if known is not None else None
        if cached is not None:
            return cached
        document = await self._transaction("load_document", work, write=False)
        if known is not None:
            known.learn_document((conversation_id, kind, scope), document, at)
        return document

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
        work, touched = saving(
            self._statements, conversation_id, DocumentWrite(kind, data, expected_version, scope)
        )
        return await self._compare_and_set("save_document", work, touched)

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
            check_length(what, value, ID_LENGTH)
        table = self._tables.leases
        now = self._db.now_ms()
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
        await self._db.dispose()

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
            await self._db.run("drop_tables", work, write=True)
            self._version = None
            self._forget()

    async def _migrate(self, *, upgrade: bool) -> int:
        if self._db.sqlite_file is not None:
            try:
                self._db.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # an impossible path: say which, as a store error
                folder = self._db.sqlite_file.parent
                raise StoreError(f"{self._display}: cannot create the folder {folder}: {exc}") from exc

        async def work(conn: AsyncConnection) -> int:
            return await run_migrations(conn, self._tables, upgrade=upgrade, store=self._display)

        version = await self._db.run("migrate", work, write=True)
        self._forget()  # its own connection's changes: the data version does not tell
        _log.debug("store %s at schema version %d", self._display, version)
        return version

    async def _ready(self) -> None:
        if self._version is None:
            async with self._init_lock:
                if self._version is None:
                    self._version = await self._migrate(upgrade=self._auto_migrate)

    # -- transactions ---------------------------------------------------------------------

    async def _compare_and_set(self, op: str, work: Work, touched: Touched | None = None) -> bool:
        """Run a CAS write; a duplicate key means another writer got there first.

        What a won write `touched` is learned (see `_sql_known`); a lost or failed one forgets it.
        """
        known = self._known if touched is not None else None
        inside: list[Hashable | None] = []

        async def observed(conn: AsyncConnection) -> bool:
            won = await work(conn)
            if known is not None:  # within the write lock: nothing else commits before this write
                inside.append(known.at())
            return won

        won = False
        try:
            won = await self._transaction(op, observed, write=True)
        except sa.exc.IntegrityError:
            _log.debug("%s on %s lost a compare-and-set race", op, self._display)
        finally:
            if known is not None and touched is not None:
                touched.settle(known, inside[-1] if won and inside else None)  # the attempt that committed
        return won

    def _forget(self) -> None:
        if self._known is not None:
            self._known.forget()

    def _facts(self) -> tuple[Known | None, Hashable | None]:
        """What this store knows now, and the data version it holds at (`None, None`: it keeps nothing)."""
        known = self._known
        at = known.at() if known is not None else None
        return (known, at) if at is not None else (None, None)

    async def _transaction(
        self, op: str, work: Callable[[AsyncConnection], Awaitable[_T]], *, write: bool
    ) -> _T:
        await self._ready()
        return await self._db.run(op, work, write=write)
