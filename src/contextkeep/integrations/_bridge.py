"""What every integration shares: sync a framework's history, then map the view back onto its objects.

A framework object (a LangChain message, a pydantic-ai request part, an ADK event) becomes one
or more neutral messages. :class:`Origins` remembers, per transcript message id, the object it
came from; a view message the compaction left as it was maps back to that object, and one it
changed (masked, truncated) or made (the summary, the dropped-rounds marker) has no origin, so
the integration builds a new object of the framework's own type for it.

Frameworks hand over the same objects call after call, and the view keeps its messages as
the same objects while they stay as they were: :func:`common_prefix` finds, in C, how much of
a list is the very objects of the last one, so a call converts and maps only what follows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any, Generic, TypeVar

from contextkeep._continuation import common_prefix, fingerprint, with_stable_ids
from contextkeep._ingest import as_messages
from contextkeep._messages import Message
from contextkeep._session import Session, Tools
from contextkeep._usage import Usage
from contextkeep._view import View

__all__ = ["Origins", "common_prefix", "unchanged"]  # common_prefix re-exported for the framework modules

T = TypeVar("T")
V = TypeVar("V")


def unchanged(last: V | None, new: V) -> V:
    """`last` when `new` equals it, else `new`.

    Frameworks rebuild their tool declarations for every request: handing the session the
    same list object while they read the same lets its counter know them by identity instead
    of rendering them again on every count.
    """
    return last if last is not None and last == new else new


class Origins(Generic[T]):
    """The framework object behind each transcript message of one conversation."""

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[Message, T]] = {}
        """Per transcript message id: the message as stored, and its origin."""
        self._mapped: tuple[list[Message], list[tuple[Message, T | None]]] = ([], [])
        """The last view mapped, and its mapping (reused for the messages the next view keeps)."""
        self._unmatched: set[str] = set()
        """Ids the last mapping found no origin for: an origin remembered for one makes it stale."""
        self.mapped = 0
        """View messages mapped so far (the ones the last view did not show as they are)."""

    async def sync(
        self,
        session: Session,
        history: Sequence[tuple[Message | Mapping[str, Any], T]],
        *,
        tools: Tools = None,
        instructions: str | None = None,
        fork: bool = False,
    ) -> list[Message]:
        """`Session.sync` the converted history (each message with its origin); remember the new ones.

        Messages the transcript already held (a restarted process, a run handed a copy of the
        history) get their origins too, walking back from the newest until one is known.
        """
        appended = await session.sync(
            [m for m, _ in history], tools=tools, instructions=instructions, fork=fork
        )
        held = len(history) - len(appended)
        for stored, (_, origin) in zip(appended, history[held:], strict=True):
            self.remember(stored, origin)
        self._backfill(session.transcript[: len(session.transcript) - len(appended)], history[:held])
        return appended

    def _backfill(
        self, stored: Sequence[Message], history: Sequence[tuple[Message | Mapping[str, Any], T]]
    ) -> None:
        """Origins for the held messages, newest first, while they are unknown and match the history."""
        if not stored or not history or stored[-1].id is None or stored[-1].id in self._by_id:
            return  # the usual case: the latest reply was recorded through `record`
        incoming = as_messages(with_stable_ids([m for m, _ in history]))
        for m, seen, (_, origin) in zip(
            reversed(stored), reversed(incoming), reversed(history), strict=False
        ):
            if m.id is None or m.id in self._by_id or fingerprint(m) != fingerprint(seen):
                return
            self.remember(m, origin)

    async def record(
        self, session: Session, reply: Message | Mapping[str, Any], origin: T, usage: Usage
    ) -> Message:
        """`Session.record` the model's reply and its usage; remember the object it came from."""
        stored = await session.record(reply, usage)
        self.remember(stored, origin)
        return stored

    def remember(self, stored: Message, origin: T) -> None:
        """Remember `origin` as the object behind a message stored another way (`Session.complete`)."""
        if stored.id is None:
            return
        if stored.id in self._by_id or stored.id in self._unmatched:  # the last mapping may show it
            self._mapped, self._unmatched = ([], []), set()
        self._by_id[stored.id] = (stored, origin)

    def map_view(self, session: Session, view: View | Sequence[Message]) -> list[tuple[Message, T | None]]:
        """Each view message with its origin, or None where the view changed or made the message.

        `view` is a `View` or its `neutral` messages (what `Session.complete` hands an adapter).
        A message is unchanged when what the model reads of it (its content key) is that of the
        message stored under its id when the origin was remembered; `session` (the view's
        conversation) is not read again. The messages the last view began with (the same objects)
        keep their pairs, so a view costs work per message it changed or added since.
        """
        messages = view.neutral if isinstance(view, View) else view
        last, mapped = self._mapped
        keep = common_prefix(last, messages)
        out = mapped[:keep]
        if not keep:
            self._unmatched = set()
        self.mapped += len(messages) - keep
        for m in islice(messages, keep, None):
            known = self._by_id.get(m.id) if m.id is not None else None
            unchanged = known is not None and (m is known[0] or m.key == known[0].key)
            if not unchanged and m.id is not None:
                self._unmatched.add(m.id)
            out.append((m, known[1] if known is not None and unchanged else None))
        self._mapped = (list(messages), out)
        return list(out)
