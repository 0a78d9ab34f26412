"""The persisted state of one conversation: its compaction state and its usage state.

Both are versioned store documents written with compare-and-set; the usage state is kept per
scope (agent, agent version, model). Nothing here decides what a state should become: callers
pass the change, and a lost race applies it again on top of the winner's state. A usage change
can also travel with a transcript append (:meth:`Documents.usage_save`): a recorded reply and
the usage it reported are then one store write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, Literal

from contextkeep._baseline import USAGE_DOCUMENT, UsageState
from contextkeep._cas import LOST, CompareAndSet, Lost
from contextkeep._compaction.state import CompactionState
from contextkeep.stores.base import DocumentWrite, Store

__all__ = ["COMPACTION_DOCUMENT", "Documents", "UsageSave"]

COMPACTION_DOCUMENT: Final = "compaction"
"""The store document kind the compaction state is saved under."""


class Documents:
    """The compaction and usage states of one conversation, as last loaded or saved."""

    def __init__(self, store: Store, conversation_id: str, scope: str, cas: CompareAndSet) -> None:
        self.store = store
        """Where the documents live."""
        self.conversation_id = conversation_id
        """Whose documents they are."""
        self.scope = scope
        """The usage scope (see `scope_key`)."""
        self.compaction = CompactionState()
        """The compaction state."""
        self.usage = UsageState()
        """The provider-confirmed usage state of `scope`."""
        self._cas = cas

    async def catch_up(self) -> None:
        """Reload each document another instance changed since it was last loaded."""
        doc = await self.store.load_document(self.conversation_id, COMPACTION_DOCUMENT)
        if doc.version != self.compaction.version:
            self.compaction = CompactionState.from_dict({**doc.data, "version": doc.version})
        usage = await self.store.load_document(self.conversation_id, USAGE_DOCUMENT, self.scope)
        if usage.version != self.usage.version:
            self.usage = UsageState.from_dict(usage.data, usage.version)

    async def save_compaction(self, state: CompactionState, expected: int) -> bool:
        """One attempt to save `state` over version `expected`; whether it won."""
        data = state.to_dict()
        data.pop("version")
        save = self.store.save_document(
            self.conversation_id, COMPACTION_DOCUMENT, data, expected_version=expected
        )
        won = await self._cas.write(COMPACTION_DOCUMENT, save)
        if won:
            self.compaction = state.evolve(version=expected + 1)
        return won

    async def update_compaction(
        self, change: Callable[[CompactionState], CompactionState]
    ) -> CompactionState:
        """Apply `change` to the compaction state and save it; on conflict reload and apply it again."""

        async def attempt() -> CompactionState | Literal[Lost.LOST]:
            current = self.compaction
            return self.compaction if await self.save_compaction(change(current), current.version) else LOST

        return await self._cas.retry(
            attempt, f"update the state of {self.conversation_id!r}: it kept changing"
        )

    async def save_usage(self, new: UsageState) -> None:
        """Save the usage figures of `new`; on conflict reload and save them over the winner's."""
        pending = self.usage_save(lambda _: new)

        async def attempt() -> Literal[Lost.LOST] | None:
            write = pending.write()
            if write is None:
                return None
            save = self.store.save_document(
                self.conversation_id,
                USAGE_DOCUMENT,
                write.data,
                expected_version=write.expected_version,
                scope=self.scope,
            )
            if not await self._cas.write(USAGE_DOCUMENT, save):
                return LOST  # another instance recorded first: its figures are as new as ours
            pending.written(write)
            return None

        await self._cas.retry(attempt, f"save the usage state of {self.conversation_id!r}: it kept changing")

    def usage_save(self, change: Callable[[UsageState], UsageState]) -> UsageSave:
        """`change` to the usage state as a save an append can carry (see `Transcript.saving`)."""
        return UsageSave(self, change)


@dataclass(frozen=True, slots=True)
class UsageSave:
    """A change to the usage state, applied to the state as last loaded when it is written."""

    documents: Documents
    """Whose usage state it changes."""
    change: Callable[[UsageState], UsageState]
    """The new state from the current one."""

    def write(self) -> DocumentWrite | None:
        """The save of the changed state over the current version (`None` when nothing changes)."""
        current = self.documents.usage
        wanted = self.change(current)
        if wanted.version != current.version:  # made from another state (a reloaded one): over this version
            wanted = replace(wanted, version=current.version)
        if wanted == current:
            return None
        return DocumentWrite(USAGE_DOCUMENT, wanted.to_dict(), current.version, self.documents.scope)

    def written(self, write: DocumentWrite) -> None:
        """`write` is stored: the state it saved is the current one."""
        self.documents.usage = UsageState.from_dict(write.data, write.expected_version + 1)
