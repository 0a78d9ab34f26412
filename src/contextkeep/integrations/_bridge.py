"""What every integration shares: sync a framework's history, then map the view back onto its objects.

A framework object (a LangChain message, a pydantic-ai request part, an ADK event) becomes one
or more neutral messages. :class:`Origins` remembers, per transcript message id, the object it
came from; a view message the compaction left as it was maps back to that object, and one it
changed (masked, truncated) or made (the summary, the dropped-rounds marker) has no origin, so
the integration builds a new object of the framework's own type for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from contextkeep._continuation import fingerprint, with_stable_ids
from contextkeep._ingest import as_messages
from contextkeep._messages import Message
from contextkeep._session import Session, Tools
from contextkeep._usage import Usage
from contextkeep._view import View

__all__ = ["Origins"]

T = TypeVar("T")


class Origins(Generic[T]):
    """The framework object behind each transcript message of one conversation."""

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[Message, T]] = {}
        """Per transcript message id: the message as stored, and its origin."""

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
            self._by_id[m.id] = (m, origin)

    async def record(
        self, session: Session, reply: Message | Mapping[str, Any], origin: T, usage: Usage
    ) -> Message:
        """`Session.record` the model's reply and its usage; remember the object it came from."""
        stored = await session.record(reply, usage)
        self.remember(stored, origin)
        return stored

    def remember(self, stored: Message, origin: T) -> None:
        """Remember `origin` as the object behind a message stored another way (`Session.complete`)."""
        if stored.id is not None:
            self._by_id[stored.id] = (stored, origin)

    def map_view(self, session: Session, view: View | Sequence[Message]) -> list[tuple[Message, T | None]]:
        """Each view message with its origin, or None where the view changed or made the message.

        `view` is a `View` or its `neutral` messages (what `Session.complete` hands an adapter).
        A message is unchanged when what the model reads of it (its content key) is that of the
        message stored under its id when the origin was remembered; `session` (the view's
        conversation) is not read again, so a view costs work per message in it, not per message
        in the transcript.
        """
        out: list[tuple[Message, T | None]] = []
        for m in view.neutral if isinstance(view, View) else view:
            known = self._by_id.get(m.id) if m.id is not None else None
            unchanged = known is not None and (m is known[0] or m.key == known[0].key)
            out.append((m, known[1] if known is not None and unchanged else None))
        return out
