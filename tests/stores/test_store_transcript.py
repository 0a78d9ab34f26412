"""The store contract for transcripts, on every backend: append, load, page, count, list."""

from __future__ import annotations

import asyncio

from contextkeep._messages import FilePart, ImagePart, Message, TextPart, ToolCall
from contextkeep.stores import (
    Store,
)
from stores.store_backends import Backend, conv, msgs


async def test_append_load_page_count(backend: Backend, store: Store):
    c = conv()
    assert await store.count_messages(c) == 0
    assert await store.load_messages(c) == []
    assert await store.append(c, msgs("a", "b", "c"), expected_length=0)
    assert await store.append(c, msgs("d", "e"), expected_length=3)
    everything = msgs("a", "b", "c", "d", "e")
    assert await store.count_messages(c) == 5
    assert await store.load_messages(c) == everything
    assert await store.load_messages(c, after=2) == everything[2:]
    assert await store.load_messages(c, after=1, limit=2) == everything[1:3]
    assert await store.load_messages(c, after=4, limit=10) == everything[4:]
    assert await store.load_messages(c, after=5) == []
    assert await store.load_messages(c, limit=0) == []
    # Another instance on the same data sees the same transcript.
    other = backend.reopen(store)
    assert await other.load_messages(c) == everything
    assert await other.count_messages(conv()) == 0


async def test_stale_append_returns_false_and_writes_nothing(store: Store):
    c = conv()
    assert await store.append(c, msgs("a", "b"), expected_length=0)
    assert not await store.append(c, msgs("x", "y"), expected_length=0)  # behind
    assert not await store.append(c, msgs("x"), expected_length=1)  # behind, overlapping
    assert not await store.append(c, msgs("x"), expected_length=5)  # ahead: would leave a gap
    assert not await store.append(c, [], expected_length=1)
    assert await store.append(c, [], expected_length=2)
    assert await store.load_messages(c) == msgs("a", "b")
    assert await store.append(c, msgs("c"), expected_length=2)
    assert await store.count_messages(c) == 3


async def test_concurrent_appends_exactly_one_wins(backend: Backend, store: Store):
    c = conv()
    instances = [store, backend.reopen(store)]
    batches = [msgs(f"w{i}-1", f"w{i}-2") for i in range(10)]
    results = await asyncio.gather(
        *(instances[i % 2].append(c, batch, expected_length=0) for i, batch in enumerate(batches))
    )
    assert results.count(True) == 1
    assert await store.load_messages(c) == batches[results.index(True)]
    # The next round races on the new length.
    results = await asyncio.gather(
        *(instances[i % 2].append(c, msgs(str(i)), expected_length=2) for i in range(10))
    )
    assert results.count(True) == 1
    assert await store.count_messages(c) == 3


async def test_messages_survive_exactly(backend: Backend, store: Store):
    c = conv()
    original = [
        Message("system", 'Du bist ein Assistent. 你是助手 🤖 — עברית \u2028 NUL:\x00 tab:\t "quoted" \\'),
        Message(
            "user",
            (
                TextPart("Look at this 👀", {"cache_control": {"type": "ephemeral"}}),
                ImagePart("data:image/png;base64,iVBORw0KGgo=", "image/png", {"detail": "high"}),
                FilePart("https://example.com/report.pdf", "application/pdf", "report.pdf"),
            ),
            id="m-1",
            metadata={"ck_kind": "note", "nested": {"list": [1, 2.5, None, True, "ü"], "empty": {}}},
        ),
        Message(
            "assistant",
            None,
            tool_calls=(
                ToolCall("call_1", "search", '{"q": "北京 weather"}', {"index": 0}),
                ToolCall("call_2", "read", "{}"),
            ),
            reasoning="Думаю…",
            extra={"provider_field": {"x": [1, 2]}},
        ),
        Message("tool", '{"ok": true}', tool_call_id="call_1", name="search"),
        Message("tool", "x" * 200_000, tool_call_id="call_2", name="read"),  # beyond MySQL TEXT's 64 KiB
    ]
    assert await store.append(c, original, expected_length=0)
    for instance in (store, backend.reopen(store)):
        loaded = await instance.load_messages(c)
        assert loaded == original
        assert [m.key for m in loaded] == [m.key for m in original]


async def test_list_conversations(backend: Backend, store: Store):
    ids = ["Conv", "conv", "对话-1", "a}b", "a%7Db", "{x}"]
    for i, c in enumerate(ids):
        assert await store.append(c, msgs(str(i)), expected_length=0)
    assert await store.list_conversations() == sorted(ids)
    for i, c in enumerate(ids):  # ids that look alike stay apart
        assert await store.load_messages(c) == msgs(str(i))


async def test_failed_append_creates_no_conversation(store: Store):
    assert not await store.append("lost", msgs("x"), expected_length=3)
    assert await store.append("kept", msgs("x"), expected_length=0)
    assert await store.list_conversations() == ["kept"]
