"""What keeps stores apart and how they fail: prefixes, ids SQL cannot hold, unreachable servers."""

from __future__ import annotations

import pytest

from contextkeep._errors import StoreError
from contextkeep.stores import (
    Document,
    Store,
    open_store,
)
from stores.store_backends import PERSISTENT, SQL, Backend, msgs


@pytest.mark.parametrize("backend", PERSISTENT, indirect=True)
async def test_prefixes_isolate(backend: Backend):
    a, b = backend.open(), backend.open()
    c = "shared-id"
    assert await a.append(c, msgs("in a"), expected_length=0)
    assert await b.count_messages(c) == 0
    assert await b.list_conversations() == []
    assert await b.append(c, msgs("in b", "b2"), expected_length=0)
    assert await a.load_messages(c) == msgs("in a")
    assert await a.save_document(c, "compaction", {"in": "a"}, expected_version=0)
    assert await b.load_document(c, "compaction") == Document({}, 0)
    assert await a.acquire_lease(c, "summary", "alice", 10_000)
    assert await b.acquire_lease(c, "summary", "bob", 10_000)


@pytest.mark.parametrize("backend", SQL, indirect=True)
async def test_sql_rejects_ids_it_cannot_store_alike(store: Store):
    with pytest.raises(StoreError, match="at most 255"):
        await store.append("x" * 256, msgs("a"), expected_length=0)
    assert await store.append("x" * 255, msgs("a"), expected_length=0)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2", "postgresql"),
        ("mysql://root@127.0.0.1:1/test?connect_timeout=2", "mysql"),
        ("redis://127.0.0.1:1/0?socket_connect_timeout=2", "redis"),
    ],
)
async def test_unreachable_server_raises_store_error(url: str, name: str):
    store = open_store(url)
    try:
        with pytest.raises(StoreError, match="failed on"):
            await store.count_messages("c")
    finally:
        await store.close()
