"""The transcript log: one conversation's messages, in order, as added (never edited).

It keeps the rounds incrementally (a :class:`RoundTracker`) and the tool call ids that already
have a result, catches up with what other instances appended, and appends with compare-and-set:
a batch is validated (and repaired, if the policy says so) on top of exactly the messages the
store holds, or validated again after reloading. An append made while a document save is
pending (:meth:`Transcript.saving`: a recorded reply and its usage state) writes both in one
transaction where the store can (:class:`~contextkeep.stores.base.AtomicStore`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Protocol

from contextkeep._cas import LOST, CompareAndSet, Lost
from contextkeep._errors import StoreError
from contextkeep._messages import Message
from contextkeep._rounds import Repair, RepairPolicy, Round, RoundTracker, append_repaired
from contextkeep.stores.base import AtomicStore, DocumentWrite, Store

__all__ = ["Appended", "Ingester", "PendingSave", "Transcript"]

Ingester = Callable[[Message, set[str]], Awaitable[Message]]
"""Prepares a message for storage (offloading at ingest).

The set holds those of the batch's tool call ids that already have a result (the ingester adds each
one it sees), which is all it asks about.
"""


@dataclass(frozen=True, slots=True)
class Appended:
    """What one append stored."""

    messages: list[Message]
    """The messages as stored (ids stamped, offload references in their metadata)."""
    repairs: list[Repair]
    """The repairs the policy made to the batch."""


class PendingSave(Protocol):
    """A document save that may travel with the next append (see :meth:`Transcript.saving`)."""

    def write(self) -> DocumentWrite | None:
        """The save to make now, over the document as last loaded (`None`: nothing to change)."""
        ...

    def written(self, write: DocumentWrite) -> None:
        """`write` was stored with the append."""
        ...


class Transcript:
    """The append-only message log of one conversation."""

    def __init__(self, store: Store, conversation_id: str, cas: CompareAndSet) -> None:
        self.store = store
        """Where the log is persisted."""
        self.conversation_id = conversation_id
        """Whose log it is."""
        self.messages: list[Message] = []
        """Every message, in order (append only)."""
        self.tracker = RoundTracker()
        """The rounds of `messages`, kept incrementally."""
        self._answered: set[str] = set()  # call ids that already have a result
        self._cas = cas
        # Decided once: a protocol isinstance costs ~0.1 ms.
        self._atomic = store if isinstance(store, AtomicStore) else None
        self._pending: PendingSave | None = None

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def rounds(self) -> Sequence[Round]:
        """The rounds, in order."""
        return self.tracker.rounds

    async def catch_up(self) -> None:
        """Load what other instances appended since this log was last loaded."""
        fresh = await self.store.load_messages(self.conversation_id, after=len(self.messages))
        for m in fresh:
            self.tracker.append(m)
        self._extend(fresh)

    @contextmanager
    def saving(self, pending: PendingSave | None) -> Iterator[None]:
        """Appends inside the block carry `pending`'s save (one write where the store can; else none)."""
        self._pending = pending
        try:
            yield
        finally:
            self._pending = None

    async def append(self, batch: Sequence[Message], policy: RepairPolicy, ingest: Ingester) -> Appended:
        """Validate `batch` under `policy`, `ingest` it and append it (on conflict, over the winner's)."""

        async def attempt() -> Appended | Literal[Lost.LOST]:
            base, tracker = len(self.messages), self.tracker
            # Validated in place and undone at once (O(batch), no copy of the history's rounds and
            # ids): the log changes only once the write won, and nothing awaited sees the trial.
            with tracker.trial():
                accepted, repairs = append_repaired(tracker, batch, policy)
                # Ids are unique per conversation: an automatic one never reuses an id a caller gave.
                stamped = [
                    m if m.id else m.with_id(tracker.unique_id(f"m{base + i:06d}"))
                    for i, m in enumerate(accepted)
                ]
            answered = {m.tool_call_id for m in stamped if m.tool_call_id in self._answered}
            stamped = [await ingest(m, answered) for m in stamped]
            if not await self._cas.write("transcript", self._write(stamped, base)):
                return LOST  # another instance appended first: validate again on top of its messages
            if len(tracker) == base:  # as the trial found it: exactly what it accepted, ids and all
                tracker.extend_accepted(stamped)
            else:  # something else was appended meanwhile: checked again, it cannot be silently doubled
                tracker.extend(stamped)
            self._extend(stamped)
            return Appended(stamped, repairs)

        return await self._cas.retry(
            attempt, f"append to {self.conversation_id!r}: the transcript kept changing"
        )

    async def _write(self, stamped: list[Message], base: int) -> bool:
        """Store `stamped` after `base` messages, with the pending save if the store takes both at once."""
        if await self._together(stamped, base):
            return True
        # One by one: which write lost, and the append's idempotency, are then the store's own.
        return await self.store.append(self.conversation_id, stamped, expected_length=base)

    async def _together(self, stamped: list[Message], base: int) -> bool:
        """Whether `stamped` and the pending save were stored in one write."""
        pending, atomic = self._pending, self._atomic
        if pending is None or atomic is None or (document := pending.write()) is None:
            return False
        try:
            if not await atomic.append_and_save(
                self.conversation_id, stamped, expected_length=base, document=document
            ):
                return False
        except StoreError:  # e.g. the document may not be written: the reply is stored all the same
            return False
        pending.written(document)
        return True

    def _extend(self, messages: Sequence[Message]) -> None:
        self.messages.extend(messages)
        self._answered.update(m.tool_call_id for m in messages if m.role == "tool" and m.tool_call_id)
