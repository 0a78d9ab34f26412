"""Optional store capabilities are typed sub-protocols: a backend name, an on-demand schema migration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from contextkeep._events import StoreSaveFailed
from contextkeep._messages import Message
from contextkeep.stores import Document, MemoryStore, MigratableStore, NamedStore, Store, open_store
from contextkeep.stores.base import backend_name, reporting_failure


class BareStore:
    """A user's store with nothing but the `Store` methods (over a memory store)."""

    def __init__(self) -> None:
        self.inner = MemoryStore()

    async def append(
        self, conversation_id: str, messages: Sequence[Message], *, expected_length: int
    ) -> bool:
        return await self.inner.append(conversation_id, messages, expected_length=expected_length)

    async def load_messages(
        self, conversation_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Message]:
        return await self.inner.load_messages(conversation_id, after=after, limit=limit)

    async def count_messages(self, conversation_id: str) -> int:
        return await self.inner.count_messages(conversation_id)

    async def load_document(self, conversation_id: str, kind: str, scope: str = "") -> Document:
        return await self.inner.load_document(conversation_id, kind, scope)

    async def save_document(
        self,
        conversation_id: str,
        kind: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        scope: str = "",
    ) -> bool:
        return await self.inner.save_document(
            conversation_id, kind, data, expected_version=expected_version, scope=scope
        )

    async def list_scopes(self, conversation_id: str, kind: str) -> list[str]:
        return await self.inner.list_scopes(conversation_id, kind)

    async def acquire_lease(self, conversation_id: str, name: str, owner: str, ttl_ms: int) -> bool:
        return await self.inner.acquire_lease(conversation_id, name, owner, ttl_ms)

    async def release_lease(self, conversation_id: str, name: str, owner: str) -> None:
        await self.inner.release_lease(conversation_id, name, owner)

    async def list_conversations(self) -> list[str]:
        return await self.inner.list_conversations()

    async def close(self) -> None:
        await self.inner.close()


class SchemaStore(BareStore):
    """A user's store that also names its backend and migrates on demand."""

    backend = "custom-db"

    async def migrate(self) -> int:
        return 7


async def test_built_in_stores_declare_their_capabilities(tmp_path: Path) -> None:
    sql, redis, memory = (
        open_store(f"sqlite:///{tmp_path / 'ck.db'}"),
        open_store("redis://127.0.0.1:6379/0"),  # nothing connects until the first call
        open_store("memory://"),
    )
    assert all(isinstance(s, NamedStore) for s in (sql, redis, memory))
    assert [backend_name(s) for s in (sql, redis, memory)] == ["sqlite", "redis", "memory"]
    assert isinstance(sql, MigratableStore) and isinstance(redis, MigratableStore)
    assert not isinstance(memory, MigratableStore)
    for store in (sql, redis, memory):
        await store.close()


async def test_a_users_store_gets_what_it_declares() -> None:
    bare, schema = BareStore(), SchemaStore()
    assert isinstance(bare, Store) and not isinstance(bare, NamedStore | MigratableStore)
    assert backend_name(bare) == "BareStore"  # no name: its class names it
    assert isinstance(schema, NamedStore) and isinstance(schema, MigratableStore)
    assert backend_name(schema) == "custom-db" and await schema.migrate() == 7


async def test_a_failed_save_is_labelled_with_the_backend_name() -> None:
    reported: list[StoreSaveFailed] = []

    async def report(event: StoreSaveFailed) -> None:
        reported.append(event)

    async def failing() -> bool:
        raise OSError("disk full")

    for store in (BareStore(), SchemaStore()):
        with pytest.raises(OSError, match="disk full"):
            await reporting_failure(store, "compaction", failing(), report)
    assert [(e.store, e.kind, e.error) for e in reported] == [
        ("BareStore", "compaction", "disk full"),
        ("custom-db", "compaction", "disk full"),
    ]
