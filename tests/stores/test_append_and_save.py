"""`append_and_save`, on every backend: an append and a document save in one write, both or neither."""

from __future__ import annotations

import asyncio

from contextkeep.stores import AtomicStore, Document, DocumentWrite, Store
from stores.store_backends import Backend, conv, msgs

USAGE = "usage"
SCOPE = "agent|0|model"


def usage(version: int, tokens: int) -> DocumentWrite:
    return DocumentWrite(USAGE, {"tokens": tokens}, version, SCOPE)


async def test_both_are_written_when_both_expectations_hold(backend: Backend, store: Store):
    assert isinstance(store, AtomicStore)
    c = conv()
    assert await store.append_and_save(c, msgs("a", "b"), expected_length=0, document=usage(0, 10))
    assert await store.append_and_save(c, msgs("c"), expected_length=2, document=usage(1, 20))
    again = backend.reopen(store)
    assert await again.load_messages(c) == msgs("a", "b", "c")
    assert await again.load_document(c, USAGE, SCOPE) == Document({"tokens": 20}, 2)
    assert await again.list_scopes(c, USAGE) == [SCOPE]
    assert await again.list_conversations() == [c]


async def test_a_stale_expectation_writes_neither(store: Store):
    assert isinstance(store, AtomicStore)
    c = conv()
    assert await store.append_and_save(c, msgs("a"), expected_length=0, document=usage(0, 10))
    # The transcript moved on: the document, whose version was right, is not saved either.
    assert not await store.append_and_save(c, msgs("x"), expected_length=0, document=usage(1, 99))
    # The document moved on: the messages, whose position was right, are not appended either.
    assert not await store.append_and_save(c, msgs("x"), expected_length=1, document=usage(0, 99))
    assert not await store.append_and_save(c, msgs("x"), expected_length=1, document=usage(5, 99))
    assert await store.load_messages(c) == msgs("a")
    assert await store.load_document(c, USAGE, SCOPE) == Document({"tokens": 10}, 1)
    assert await store.load_messages(conv()) == []  # a failed first write creates no conversation


async def test_a_retried_batch_is_refused_and_the_plain_append_acknowledges_it(store: Store):
    """After a lost reply the caller writes one by one: `append` then finds its batch stored."""
    assert isinstance(store, AtomicStore)
    c, batch = conv(), msgs("a", "b")
    assert await store.append_and_save(c, batch, expected_length=0, document=usage(0, 10))
    assert not await store.append_and_save(c, batch, expected_length=0, document=usage(0, 10))
    assert await store.append(c, batch, expected_length=0)
    assert await store.load_messages(c) == batch
    assert await store.load_document(c, USAGE, SCOPE) == Document({"tokens": 10}, 1)


async def test_concurrent_writers_one_wins(backend: Backend, store: Store):
    assert isinstance(store, AtomicStore)
    c = conv()
    assert await store.append_and_save(c, msgs("a"), expected_length=0, document=usage(0, 1))
    other = backend.reopen(store)
    assert isinstance(other, AtomicStore)
    writers = [
        (store if i % 2 else other).append_and_save(c, msgs(f"w{i}"), expected_length=1, document=usage(1, i))
        for i in range(8)
    ]
    won = [i for i, ok in enumerate(await asyncio.gather(*writers)) if ok]
    assert len(won) == 1
    assert await store.load_messages(c) == msgs("a", f"w{won[0]}")
    assert await store.load_document(c, USAGE, SCOPE) == Document({"tokens": won[0]}, 2)
