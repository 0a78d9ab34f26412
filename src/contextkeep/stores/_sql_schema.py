"""Tables of the SQL store and the ordered migrations that build them.

`MIGRATIONS[i]` moves a database from schema version `i` to `i + 1`; the latest
version is `len(MIGRATIONS)`. A step must describe the shape *of its own
version* (the v1 step keeps creating v1 tables even after a v2 step alters
them), so a fresh database and an upgraded one end up identical.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeAlias

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.ext.asyncio import AsyncConnection

from contextkeep._errors import SchemaVersionError

__all__ = ["MIGRATIONS", "Migration", "Tables", "latest_version", "make_tables", "run_migrations"]

ID_LENGTH = 255
"""Longest conversation id, lease name, owner or document scope (keeps MySQL keys under 3072 bytes)."""
KIND_LENGTH = 64
"""Longest document kind."""

# MySQL's TEXT stops at 64 KiB: a message with an inline image needs LONGTEXT.
_BODY = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
# utf8mb4 stores every code point; the binary collation keeps ids case-sensitive, as elsewhere.
_MYSQL_OPTIONS: dict[str, Any] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}


@dataclass(frozen=True, slots=True)
class Tables:
    """The four tables under one prefix."""

    metadata: sa.MetaData
    messages: sa.Table
    documents: sa.Table
    leases: sa.Table
    schema_version: sa.Table


def _key(name: str, length: int = ID_LENGTH) -> sa.Column[str]:
    return sa.Column(name, sa.String(length), primary_key=True)


def make_tables(prefix: str) -> Tables:
    """The current table definitions, named `{prefix}messages` and so on."""
    md = sa.MetaData()
    return Tables(
        metadata=md,
        messages=sa.Table(
            f"{prefix}messages",
            md,
            _key("conversation_id"),
            sa.Column("position", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("body", _BODY, nullable=False),
            **_MYSQL_OPTIONS,
        ),
        documents=sa.Table(
            f"{prefix}documents",
            md,
            _key("conversation_id"),
            _key("kind", KIND_LENGTH),
            _key("scope"),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("body", _BODY, nullable=False),
            **_MYSQL_OPTIONS,
        ),
        leases=sa.Table(
            f"{prefix}leases",
            md,
            _key("conversation_id"),
            _key("name"),
            sa.Column("owner", sa.String(ID_LENGTH), nullable=False),
            sa.Column("expires_at", sa.BigInteger, nullable=False),  # ms since the epoch, database clock
            **_MYSQL_OPTIONS,
        ),
        schema_version=sa.Table(
            f"{prefix}schema_version",
            md,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),  # always 1: one row
            sa.Column("version", sa.Integer, nullable=False),
            **_MYSQL_OPTIONS,
        ),
    )


Migration: TypeAlias = Callable[[AsyncConnection, Tables], Awaitable[None]]
"""One upgrade step, run inside the migration transaction."""


async def _v1_create_tables(conn: AsyncConnection, tables: Tables) -> None:
    """Version 1: the transcript, documents and leases tables."""
    for table in (tables.messages, tables.documents, tables.leases):
        await conn.run_sync(table.create, checkfirst=True)


MIGRATIONS: list[Migration] = [_v1_create_tables]
"""Step `i` upgrades schema version `i` to `i + 1`."""


def latest_version() -> int:
    """The schema version this code writes (read at call time so tests can add a step)."""
    return len(MIGRATIONS)


async def run_migrations(conn: AsyncConnection, tables: Tables, *, upgrade: bool, store: str) -> int:
    """Create or upgrade the schema inside `conn`'s transaction; the version reached.

    A missing schema is always created. An older one is upgraded only when
    `upgrade` is set; a newer one is never touched. `store` is the (password
    masked) URL quoted in the error so the message names the exact fix.
    """
    async with _migration_lock(conn, tables):
        await conn.run_sync(tables.schema_version.create, checkfirst=True)
        version_table = tables.schema_version
        found = (await conn.execute(sa.select(version_table.c.version))).scalar()
        current = 0 if found is None else int(found)
        latest = latest_version()
        command = f"contextkeep migrate --store '{store}'"
        if current > latest:
            raise SchemaVersionError(
                f"store {store} has schema version {current}, newer than this contextkeep knows ({latest}): "
                f"upgrade contextkeep here; `{command}` only upgrades older schemas"
            )
        if current == latest:
            return current
        if current > 0 and not upgrade:
            raise SchemaVersionError(
                f"store {store} has schema version {current}, older than this contextkeep needs ({latest}) "
                f"and auto_migrate is off: run `{command}`"
            )
        for step in range(current, latest):
            await MIGRATIONS[step](conn, tables)
        if found is None:
            await conn.execute(sa.insert(version_table).values(id=1, version=latest))
        else:
            await conn.execute(sa.update(version_table).values(version=latest))
        return latest


@asynccontextmanager
async def _migration_lock(conn: AsyncConnection, tables: Tables) -> AsyncIterator[None]:
    """Serialise schema work across instances: concurrent DDL otherwise fails on "table exists".

    PostgreSQL: a transaction-scoped advisory lock. MySQL/MariaDB: a named lock
    (DDL commits implicitly there, so no transaction could hold it). SQLite: the
    store's write transactions already start with `BEGIN IMMEDIATE`.
    """
    name = tables.schema_version.name
    dialect = conn.dialect.name
    if dialect == "postgresql":
        await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": zlib.crc32(name.encode())})
    elif dialect in ("mysql", "mariadb"):
        await conn.execute(sa.text("SELECT GET_LOCK(:n, 60)"), {"n": name})
    try:
        yield
    finally:
        if dialect in ("mysql", "mariadb"):
            await conn.execute(sa.text("SELECT RELEASE_LOCK(:n)"), {"n": name})
