"""A recorded reply and the usage it reported are one store write where the store can make it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from contextkeep import ContextManager, ModelSpec
from contextkeep._baseline import UsageState, UsageStatus
from contextkeep._errors import StoreError
from contextkeep._messages import Message
from contextkeep._usage import Usage
from contextkeep.models.adapter import ModelReply
from contextkeep.stores import DocumentWrite, MemoryStore

REPLY = ModelReply(message=Message("assistant", "done"), usage=Usage(input_tokens=100, output_tokens=10))


class Spy(MemoryStore):
    """A memory store that logs its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    async def append(
        self, conversation_id: str, messages: Sequence[Message], *, expected_length: int
    ) -> bool:
        self.writes.append("append")
        return await super().append(conversation_id, messages, expected_length=expected_length)

    async def save_document(
        self,
        conversation_id: str,
        kind: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        scope: str = "",
    ) -> bool:
        self.writes.append(f"save {kind}")
        return await super().save_document(
            conversation_id, kind, data, expected_version=expected_version, scope=scope
        )

    async def append_and_save(
        self,
        conversation_id: str,
        messages: Sequence[Message],
        *,
        expected_length: int,
        document: DocumentWrite,
    ) -> bool:
        self.writes.append(f"append+save {document.kind}")
        return await super().append_and_save(
            conversation_id, messages, expected_length=expected_length, document=document
        )


def manager(tmp_path: Path, store: Spy) -> ContextManager:
    return ContextManager(ModelSpec("m", 8000), store=store, workspace=tmp_path / "ws", tokenizer="heuristic")


async def test_the_reply_and_its_usage_are_one_write(tmp_path: Path):
    store = Spy()
    async with manager(tmp_path, store).session("c") as session:
        await session.add([{"role": "user", "content": "task"}])
        await session.prepare()
        store.writes.clear()
        await session.record(REPLY)
        assert store.writes == ["append+save usage"]
        assert session.usage.baseline == 110
    async with manager(tmp_path, store).session("c") as again:
        assert [m.text for m in again.transcript] == ["task", "done"]
        assert again.usage.status is UsageStatus.CONFIRMED_BASELINE
        assert again.usage.baseline == 110


async def test_usage_saved_meanwhile_by_another_instance_is_saved_over(tmp_path: Path):
    """The joint write is refused; the reply is appended alone and the usage saved over the winner's."""
    store = Spy()
    async with manager(tmp_path, store).session("c") as session:
        await session.add([{"role": "user", "content": "task"}])
        await session.prepare()
        theirs = UsageState(UsageStatus.CONFIRMED_BASELINE, baseline=5).to_dict()
        assert await store.save_document("c", "usage", theirs, expected_version=0, scope=session.scope)
        store.writes.clear()
        await session.record(REPLY)
        assert store.writes[:2] == ["append+save usage", "append"]
        assert [m.text for m in session.transcript] == ["task", "done"]
        stored = await store.load_document("c", "usage", session.scope)
        assert stored.data["baseline"] == 110
        assert stored.version == session.usage.version == 2


async def test_a_joint_write_that_fails_leaves_the_reply_stored_alone(tmp_path: Path):
    """As when usage is saved on its own: a store that cannot write the usage still keeps the reply."""

    class NoDocuments(Spy):
        async def append_and_save(self, *args: Any, **kwargs: Any) -> bool:
            raise StoreError("permission denied for the documents table")

        async def save_document(self, *args: Any, **kwargs: Any) -> bool:
            raise StoreError("permission denied for the documents table")

    store = NoDocuments()
    async with manager(tmp_path, store).session("c") as session:
        await session.add([{"role": "user", "content": "task"}])
        await session.prepare()
        with pytest.raises(StoreError, match="permission denied"):
            await session.record(REPLY)
    assert [m.text for m in await store.load_messages("c")] == ["task", "done"]
