"""The in-memory store: one process, nothing survives a restart. For tests and scripts."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from contextkeep._messages import Message
from contextkeep.stores._idempotent import same_batch
from contextkeep.stores.base import Document, DocumentWrite

__all__ = ["MemoryStore"]


class MemoryStore:
    """A :class:`~contextkeep.stores.base.Store` kept in dictionaries."""

    def __init__(self) -> None:
        self._messages: dict[str, list[Message]] = {}
        self._documents: dict[tuple[str, str, str], Document] = {}
        self._leases: dict[tuple[str, str], tuple[str, float]] = {}
        # No lock: no method awaits, so each runs whole between two steps of the event loop.

    @property
    def backend(self) -> str:
        """`memory` (labels failed saves)."""
        return "memory"

    async def append(
        self, conversation_id: str, messages: Sequence[Message], *, expected_length: int
    ) -> bool:
        """Append `messages` if exactly `expected_length` are stored; `False` (nothing written) otherwise."""
        stored = self._messages.get(conversation_id, [])
        if len(stored) != expected_length:
            return (
                expected_length >= 0
                and bool(messages)
                and same_batch(stored[expected_length : expected_length + len(messages)], messages)
            )
        self._messages.setdefault(conversation_id, stored).extend(messages)
        return True

    async def append_and_save(
        self,
        conversation_id: str,
        messages: Sequence[Message],
        *,
        expected_length: int,
        document: DocumentWrite,
    ) -> bool:
        """`append` and `save_document(document)` at once: both, or neither and `False`."""
        stored = self._messages.get(conversation_id, [])
        key = (conversation_id, document.kind, document.scope)
        if len(stored) != expected_length or self._version(key) != document.expected_version:
            return False
        self._messages.setdefault(conversation_id, stored).extend(messages)
        self._documents[key] = Document(dict(document.data), document.expected_version + 1)
        return True

    def _version(self, key: tuple[str, str, str]) -> int:
        stored = self._documents.get(key)
        return 0 if stored is None else stored.version

    async def load_messages(
        self, conversation_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Message]:
        """Messages from position `after` on (at most `limit`), in order."""
        stored = self._messages.get(conversation_id, [])
        return stored[after : None if limit is None else after + limit]

    async def count_messages(self, conversation_id: str) -> int:
        """How many messages the transcript holds."""
        return len(self._messages.get(conversation_id, []))

    async def load_document(self, conversation_id: str, kind: str, scope: str = "") -> Document:
        """The document, or an empty one with version 0."""
        return self._documents.get((conversation_id, kind, scope), Document({}, 0))

    async def save_document(
        self,
        conversation_id: str,
        kind: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        scope: str = "",
    ) -> bool:
        """Save as version `expected_version + 1` if the stored one is `expected_version`, else `False`."""
        key = (conversation_id, kind, scope)
        if self._version(key) != expected_version:
            return False
        self._documents[key] = Document(dict(data), expected_version + 1)
        return True

    async def list_scopes(self, conversation_id: str, kind: str) -> list[str]:
        """The scopes holding a saved document of `kind` for the conversation, sorted."""
        return sorted(scope for (c, k, scope) in self._documents if c == conversation_id and k == kind)

    async def acquire_lease(self, conversation_id: str, name: str, owner: str, ttl_ms: int) -> bool:
        """Take (or renew, for the same owner) a lease; an expired lease is taken over."""
        now = time.monotonic()
        holder = self._leases.get((conversation_id, name))
        if holder is not None and holder[0] != owner and holder[1] > now:
            return False
        self._leases[(conversation_id, name)] = (owner, now + ttl_ms / 1000)
        return True

    async def release_lease(self, conversation_id: str, name: str, owner: str) -> None:
        """Give a lease back (only its owner can)."""
        holder = self._leases.get((conversation_id, name))
        if holder is not None and holder[0] == owner:
            del self._leases[(conversation_id, name)]

    async def list_conversations(self) -> list[str]:
        """Every conversation id with a transcript."""
        return sorted(self._messages)

    async def close(self) -> None:
        """Nothing to release: the data lives as long as the object."""
        return None
