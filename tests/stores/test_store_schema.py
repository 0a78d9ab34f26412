"""Schema versions on the persistent backends: upgrades, refusals of newer schemas, migrate."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from contextkeep._errors import SchemaVersionError
from contextkeep.stores import (
    RedisStore,
    SQLStore,
    Store,
    _sql_schema,
    migrate,
)
from stores.store_backends import PERSISTENT, SQL, Backend, msgs, unique
from support import backends


@pytest.mark.parametrize("backend", backends("redis"), indirect=True)
async def test_a_layout_1_redis_store_indexes_its_documents_on_first_use(backend: Backend):
    url = backend.url()
    store = backend.open(url)
    c = "conv } with % braces"
    assert await store.save_document(c, "usage", {"n": 1}, expected_version=0, scope="agent|1|m")
    assert isinstance(store, RedisStore)
    # What layout 1 held: the document without its scope set.
    await store.client.delete(store._scopes_key(c, "usage"))
    await _force_version(store, 1)
    upgraded = backend.open(url)
    assert await upgraded.list_scopes(c, "usage") == ["agent|1|m"]
    version = await store.client.get(f"{store.key_prefix}schema_version")
    assert version is not None and int(version) == 2


async def _force_version(store: Store, version: int) -> None:
    """Write a schema version into the store as another contextkeep would."""
    if isinstance(store, RedisStore):
        await store.client.set(f"{store.key_prefix}schema_version", version)
        return
    assert isinstance(store, SQLStore)
    async with store.engine.begin() as conn:
        await conn.execute(
            sa.text(f"UPDATE {store.table_prefix}schema_version SET version = :v"), {"v": version}
        )


@pytest.mark.parametrize("backend", PERSISTENT, indirect=True)
async def test_newer_schema_is_refused(backend: Backend):
    url = backend.url()
    store = backend.open(url)
    assert await store.append("c", msgs("a"), expected_length=0)  # creates the schema
    await _force_version(store, 99)
    newer = backend.open(url)
    with pytest.raises(SchemaVersionError, match="99") as caught:
        await newer.load_messages("c")
    assert "newer" in str(caught.value)
    assert "contextkeep migrate --store" in str(caught.value)
    with pytest.raises(SchemaVersionError):
        await migrate(url)  # migrate never downgrades


@pytest.mark.parametrize("backend", SQL, indirect=True)
async def test_older_schema_needs_migrate_unless_auto(backend: Backend, monkeypatch: pytest.MonkeyPatch):
    prefix = unique("t")
    store = backend.open(backend.url(prefix))
    assert await store.append("c", msgs("kept"), expected_length=0)  # schema version 1

    async def add_kind_index(conn, tables):
        await conn.run_sync(sa.Index(f"{tables.documents.name}_kind", tables.documents.c.kind).create)

    monkeypatch.setattr(_sql_schema, "MIGRATIONS", [*_sql_schema.MIGRATIONS, add_kind_index])
    strict_url = backend.url(prefix, auto_migrate="false")
    with pytest.raises(SchemaVersionError, match="auto_migrate") as caught:
        await backend.open(strict_url).load_messages("c")
    assert "contextkeep migrate --store '" in str(caught.value)
    assert f"table_prefix={prefix}_" in str(caught.value)  # the command names this very store

    assert await migrate(strict_url) == 2
    upgraded = backend.open(strict_url)
    assert await upgraded.load_messages("c") == msgs("kept")
    assert isinstance(upgraded, SQLStore)
    async with upgraded.engine.connect() as conn:
        indexes = await conn.run_sync(lambda sync: sa.inspect(sync).get_indexes(f"{prefix}_documents"))
        version = await conn.scalar(sa.text(f"SELECT version FROM {prefix}_schema_version"))
    assert f"{prefix}_documents_kind" in [i["name"] for i in indexes]
    assert version == 2

    # With auto_migrate (the default) an old schema is upgraded on first use.
    auto_prefix = unique("t")
    monkeypatch.setattr(_sql_schema, "MIGRATIONS", _sql_schema.MIGRATIONS[:1])
    assert await backend.open(backend.url(auto_prefix)).append("c", msgs("v1"), expected_length=0)
    monkeypatch.setattr(_sql_schema, "MIGRATIONS", [*_sql_schema.MIGRATIONS, add_kind_index])
    assert await backend.open(backend.url(auto_prefix)).load_messages("c") == msgs("v1")
    assert await migrate(backend.url(auto_prefix)) == 2  # already there: nothing to do
