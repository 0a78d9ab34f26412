"""Read-only inspection of a conversation: its current view and status, without compacting.

:func:`current_view` rebuilds exactly what the next `prepare()` would send if no
compaction ran, from the session's public pieces (transcript, state, config,
counter, budget). It never writes to the store and emits no event.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextkeep._baseline import figures, ui_text
from contextkeep._compaction.builder import REF_KEY
from contextkeep._compaction.render import TRUNCATION_MARKER
from contextkeep._events import ContextStatus
from contextkeep._messages import Message, message_to_dict
from contextkeep._session import Session

__all__ = [
    "CallLog",
    "CurrentView",
    "current_view",
    "describe_message",
    "describe_view",
    "references_in",
    "usage_report",
]

_REFERENCE = re.compile(r"\[Full detail available at: ([^\]\s]+)\]|refer to the file in '([^']+)'")


@dataclass(frozen=True, slots=True)
class CurrentView:
    """What the model would see at the next call, before any compaction that call might trigger."""

    messages: list[Message]
    """The view, provider-neutral."""
    tokens: int
    """Its prompt tokens (local count, without tools)."""
    status: ContextStatus
    """Budget, ratio and state of the view."""


async def current_view(session: Session) -> CurrentView:
    """Catch the session up with the store and measure its view (no compaction, no events)."""
    view = await session.current_view()
    return CurrentView(view.neutral, view.tokens, view.status)


def references_in(text: str) -> list[str]:
    """Every offload reference a text shows (`[Full detail available at: …]`, truncation reminders)."""
    return [a or b for a, b in _REFERENCE.findall(text)]


def _kind(m: Message, original: Message | None) -> str | None:
    marked = m.metadata.get("ck_kind")
    if isinstance(marked, str):
        return marked
    if original is None:
        return None
    if m.role == "tool" and original.text != m.text:
        return "truncated" if TRUNCATION_MARKER in m.text else "masked"
    # Only what really lost an image or file says so; any other change is a plain rewrite.
    if len(m.media) < len(original.media):
        return "media_removed"
    return None if original.text == m.text else "rewritten"


def describe_message(m: Message, original: Message | None = None) -> dict[str, Any]:
    """A message as JSON for the inspector: its fields, how compaction changed it, its references."""
    data = message_to_dict(m)
    data.pop("metadata", None)
    data.pop("extra", None)
    data["text"] = m.text
    data["kind"] = _kind(m, original)
    refs = references_in(m.text)
    stored = m.metadata.get(REF_KEY)
    if isinstance(stored, str) and stored not in refs:
        refs.append(stored)
    data["references"] = refs
    return data


class CallLog(Mapping[str, list[dict[str, Any]]]):
    """The views sent at a conversation's recent calls, described when asked for, not at every call.

    `records` holds, per conversation, what `record` returns; `transcripts` gives the
    conversation's transcript (each view message is compared with the one it derives from).
    """

    def __init__(
        self,
        records: Mapping[str, Sequence[Mapping[str, Any]]],
        transcripts: Callable[[str], Sequence[Message]],
    ) -> None:
        self._records, self._transcripts = records, transcripts

    @staticmethod
    def record(number: int, view: Sequence[Message], tokens: int) -> dict[str, Any]:
        """What is kept of one call (the view's messages are shared, not copied or described)."""
        return {"call": number, "at": time.time(), "tokens": tokens, "view": tuple(view)}

    def __getitem__(self, conversation_id: str) -> list[dict[str, Any]]:
        records = self._records[conversation_id]
        by_id = {m.id: m for m in self._transcripts(conversation_id) if m.id}
        return [
            {
                "call": r["call"],
                "at": r["at"],
                "tokens": r["tokens"],
                "messages": [describe_message(m, by_id.get(m.id)) for m in r["view"]],
            }
            for r in records
        ]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)


def describe_view(view: CurrentView, transcript: Sequence[Message]) -> dict[str, Any]:
    """The view as JSON, each message compared with the transcript message it derives from."""
    by_id: Mapping[str | None, Message] = {m.id: m for m in transcript if m.id}
    return {
        "tokens": view.tokens,
        "status": view.status.to_dict(),
        "messages": [describe_message(m, by_id.get(m.id)) for m in view.messages],
    }


def usage_report(session: Session) -> dict[str, Any]:
    """The confirmed-usage state with its figures and the seed's indicator texts."""
    usage, state = session.usage, session.state
    budget = session.budget()
    numbers = figures(usage, budget.context_window, budget.reserved_output)
    required = state.compression_required
    return {
        **usage.to_dict(),
        "version": usage.version,
        "valid": usage.valid,
        "usable_input": numbers.usable_input,
        "ratio": numbers.ratio,
        "remaining": numbers.remaining,
        "compression_required": required,
        "compression_reason": state.compression_reason,
        "ui_text": ui_text(usage, numbers, compression_required=required),
        "ui_text_zh": ui_text(usage, numbers, compression_required=required, chinese=True),
    }
