"""A read after another writer's commit sees it, though a SQLite file store answers some reads itself.

A SQLite file store skips the reads that would find only its own writes (see `_sql_known`):
these tests are the writes that must not be missed, by another instance, a tool on the
store's engine, or a reset of the tables.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from contextkeep._messages import Message, message_json
from contextkeep.stores import Document, SQLStore, Store
from stores.store_backends import PERSISTENT, Backend, conv, msgs
from support import backends


async def learn(store: Store, c: str) -> None:
    """Everything a session reads before a step, so the store has it all as known facts."""
    await store.load_messages(c)
    await store.load_messages(c, after=len(await store.load_messages(c)))
    await store.load_document(c, "usage", "s")


@pytest.mark.parametrize("backend", PERSISTENT, indirect=True)
async def test_another_instance_s_writes_are_read(backend: Backend, store: Store):
    c = conv()
    assert await store.append(c, msgs("a"), expected_length=0)
    assert await store.save_document(c, "usage", {"n": 1}, expected_version=0, scope="s")
    await learn(store, c)
    other = backend.reopen(store)
    assert await other.append(c, msgs("b"), expected_length=1)
    assert await other.save_document(c, "usage", {"n": 2}, expected_version=1, scope="s")
    assert await store.load_messages(c, after=1) == msgs("b")
    assert await store.load_document(c, "usage", "s") == Document({"n": 2}, 2)
    # Its own writes on top of them are read back too.
    assert await store.append(c, msgs("c"), expected_length=2)
    assert await store.load_messages(c, after=2) == msgs("c")
    assert await store.load_messages(c, after=3) == []
    assert not await store.save_document(c, "usage", {"n": 0}, expected_version=1, scope="s")
    assert await store.load_document(c, "usage", "s") == Document({"n": 2}, 2)


@pytest.mark.parametrize("backend", backends("sqlite"), indirect=True)
async def test_a_tool_writing_through_the_engine_is_read(store: Store):
    assert isinstance(store, SQLStore)
    c = conv()
    assert await store.append(c, msgs("a", "b"), expected_length=0)
    await learn(store, c)
    table = f"{store.table_prefix}messages"
    row = {"c": c, "p": 2, "b": message_json(Message("user", "from a tool"))}
    async with store.engine.begin() as conn:
        await conn.execute(sa.text(f"INSERT INTO {table} VALUES (:c, :p, :b)"), row)
    assert await store.load_messages(c, after=2) == [Message("user", "from a tool")]
    assert not await store.append(c, msgs("c"), expected_length=2)


@pytest.mark.parametrize("backend", backends("sqlite"), indirect=True)
async def test_dropped_tables_are_read_empty(store: Store):
    assert isinstance(store, SQLStore)
    c = conv()
    assert await store.append(c, msgs("a"), expected_length=0)
    assert await store.save_document(c, "usage", {"n": 1}, expected_version=0, scope="s")
    await learn(store, c)
    await store.drop_tables()
    assert await store.load_document(c, "usage", "s") == Document({}, 0)
    assert await store.load_messages(c, after=1) == []
    assert await store.load_messages(c) == []
    assert await store.append(c, msgs("again"), expected_length=0)
