"""What the proxy keeps per conversation between requests, evicted when idle.

Each conversation the proxy serves has a session (its transcript and states in memory),
the lock that serves its requests one at a time, and the history of the views it sent.
Without a bound a server that meets many conversations grows for ever, so the least
recently used conversations beyond `limit`, and any idle for `idle_seconds`, are dropped.
A conversation in the middle of a request (its lock held or awaited) is never dropped. A
dropped conversation loses only its call history: its next request loads the session from
the store, which builds the same view.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from contextkeep._session import Session

__all__ = ["CALLS_KEPT", "KeptConversations"]

CALLS_KEPT = 50
"""Views remembered per conversation for the inspector."""


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    session: Session | None = None
    calls: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=CALLS_KEPT))
    used: float = 0.0


class KeptConversations(Mapping[str, deque[dict[str, Any]]]):
    """Sessions, locks and call histories of the conversations served lately (a mapping of the histories)."""

    def __init__(
        self, limit: int = 256, idle_seconds: float = 900.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def _entry(self, conversation_id: str) -> _Entry:
        entry = self._entries.get(conversation_id)
        if entry is None:
            entry = self._entries[conversation_id] = _Entry()
        self._entries.move_to_end(conversation_id)
        entry.used = self._clock()
        self.evict()
        return entry

    def lock(self, conversation_id: str) -> asyncio.Lock:
        """The lock serving the conversation's requests one at a time (kept while held or awaited)."""
        return self._entry(conversation_id).lock

    def session(self, conversation_id: str) -> Session | None:
        """The conversation's session, if it is still kept."""
        entry = self._entries.get(conversation_id)
        return entry.session if entry is not None else None

    def keep(self, session: Session) -> None:
        """Keep `session` for its conversation's next requests."""
        self._entry(session.conversation_id).session = session

    def calls(self, conversation_id: str) -> deque[dict[str, Any]]:
        """The conversation's call history, to append a call to."""
        return self._entry(conversation_id).calls

    def __contains__(self, conversation_id: object) -> bool:
        entry = self._entries.get(conversation_id) if isinstance(conversation_id, str) else None
        return entry is not None and entry.session is not None

    def __getitem__(self, conversation_id: str) -> deque[dict[str, Any]]:
        return self._entries[conversation_id].calls

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def evict(self) -> None:
        """Drop idle entries from the least recently used end: over the limit, or unused too long."""
        stale = self._clock() - self.idle_seconds
        for conversation_id, entry in list(self._entries.items()):
            if len(self._entries) <= self.limit and entry.used > stale:
                break  # the rest were used later
            if not _busy(entry.lock):
                del self._entries[conversation_id]


def _busy(lock: asyncio.Lock) -> bool:
    return lock.locked() or bool(getattr(lock, "_waiters", None))
