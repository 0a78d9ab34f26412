"""The store contract for documents, on every backend: compare-and-set saves and their scopes."""

from __future__ import annotations

import asyncio

from contextkeep.stores import (
    Document,
    Store,
)
from stores.store_backends import Backend, conv


async def test_document_compare_and_set(backend: Backend, store: Store):
    c = conv()
    assert await store.load_document(c, "compaction") == Document({}, 0)
    assert await store.save_document(c, "compaction", {"summary": "one", "n": [1]}, expected_version=0)
    assert await store.load_document(c, "compaction") == Document({"summary": "one", "n": [1]}, 1)
    # Stale versions lose and write nothing.
    assert not await store.save_document(c, "compaction", {"summary": "stale"}, expected_version=0)
    assert not await store.save_document(c, "compaction", {"summary": "ahead"}, expected_version=2)
    assert await store.load_document(c, "compaction") == Document({"summary": "one", "n": [1]}, 1)
    assert await store.save_document(c, "compaction", {"summary": "two ✓"}, expected_version=1)
    assert await backend.reopen(store).load_document(c, "compaction") == Document({"summary": "two ✓"}, 2)
    # Kind and scope address separate documents.
    assert await store.load_document(c, "compaction", "agent-a") == Document({}, 0)
    assert await store.save_document(c, "usage", {"tokens": 10}, expected_version=0, scope="agent-a|m1")
    assert await store.save_document(c, "usage", {"tokens": 20}, expected_version=0, scope="agent-b|m1")
    assert await store.load_document(c, "usage", "agent-a|m1") == Document({"tokens": 10}, 1)
    assert await store.load_document(c, "usage", "agent-b|m1") == Document({"tokens": 20}, 1)
    assert await store.load_document(c, "usage") == Document({}, 0)
    assert await store.load_document(conv(), "compaction") == Document({}, 0)


async def test_list_scopes_names_each_saved_document_of_a_kind(backend: Backend, store: Store):
    c, other = conv(), conv()
    assert await store.list_scopes(c, "usage") == []
    for scope in ("b|1|m", "a|1|m", "odd } % [*]? scope"):
        assert await store.save_document(c, "usage", {"n": 1}, expected_version=0, scope=scope)
    assert await store.save_document(c, "usage", {"n": 2}, expected_version=1, scope="a|1|m")  # no repeat
    assert not await store.save_document(c, "usage", {"n": 3}, expected_version=5, scope="never|saved|m")
    assert await store.save_document(c, "compaction", {}, expected_version=0)
    assert await store.save_document(other, "usage", {}, expected_version=0, scope="z|1|m")
    expected = sorted(["a|1|m", "b|1|m", "odd } % [*]? scope"])
    assert await backend.reopen(store).list_scopes(c, "usage") == expected
    assert await store.list_scopes(c, "compaction") == [""]
    assert await store.list_scopes(other, "usage") == ["z|1|m"]


async def test_concurrent_document_saves_one_wins_per_version(backend: Backend, store: Store):
    c = conv()
    instances = [store, backend.reopen(store)]
    for version in (0, 1, 2):
        results = await asyncio.gather(
            *(
                instances[i % 2].save_document(c, "compaction", {"writer": i}, expected_version=version)
                for i in range(10)
            )
        )
        assert results.count(True) == 1
        assert await store.load_document(c, "compaction") == Document(
            {"writer": results.index(True)}, version + 1
        )
