"""What a SQLite file store knows of its conversations: a read that would find nothing new is skipped.

A session catches up with the store before each step (a proxied request does it twice: the
transcript's tail and two documents), and almost always finds only what it wrote itself.
SQLite's `PRAGMA data_version` changes exactly when another connection committed (another
process, another store object, a tool on `SQLStore.engine`); this store's own commits leave it
as it is, and the store knows what they wrote. So while the data version stays the one a fact
was learned at, the fact stands and answers the read: a transcript's length (a read from there
on is empty) and a document's content.

A fact is learned from a read (at the version read before it) or from a won write (at the
version read inside its transaction, which holds the write lock: nothing else commits before
it). A lost write forgets what it touched.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

from contextkeep.stores.base import Document

__all__ = ["Known", "Touched"]

_LIMIT = 4096
"""Facts kept per kind before all are dropped (a proxy keeps far fewer conversations live)."""

_K = TypeVar("_K")
_V = TypeVar("_V")

DocumentKey = tuple[str, str, str]
"""(conversation id, kind, scope)."""


class Known:
    """Facts about conversations, all learned at one data version and dropped together when it moves."""

    def __init__(self, data_version: Callable[[], Hashable | None]) -> None:
        self._data_version = data_version
        self._at: Hashable | None = None
        self._lengths: dict[str, int] = {}
        self._documents: dict[DocumentKey, Document] = {}

    def at(self) -> Hashable | None:
        """The data version now (`None`: unreadable); the facts learned at another one are forgotten."""
        version = self._data_version()
        if version is None or version != self._at:
            self.forget()
            self._at = version
        return version

    def length(self, conversation_id: str) -> int | None:
        """How many messages the transcript holds, if known (call :meth:`at` first)."""
        return self._lengths.get(conversation_id)

    def document(self, key: DocumentKey) -> Document | None:
        """The document, if known (call :meth:`at` first)."""
        return self._documents.get(key)

    def learn_length(self, conversation_id: str, length: int, at: Hashable | None) -> None:
        """The transcript holds `length` messages as of data version `at`."""
        if at is not None and at == self._at:
            _bounded(self._lengths)[conversation_id] = length

    def learn_document(self, key: DocumentKey, document: Document, at: Hashable | None) -> None:
        """The document reads `document` as of data version `at`."""
        if at is not None and at == self._at:
            _bounded(self._documents)[key] = document

    def forget_length(self, conversation_id: str) -> None:
        """The transcript's length is no longer known (a write to it lost, or failed)."""
        self._lengths.pop(conversation_id, None)

    def forget_document(self, key: DocumentKey) -> None:
        """The document is no longer known."""
        self._documents.pop(key, None)

    def forget(self) -> None:
        """Nothing is known any more."""
        self._lengths.clear()
        self._documents.clear()


@dataclass(frozen=True, slots=True)
class Touched:
    """What a compare-and-set write stores if it wins."""

    length: tuple[str, int] | None = None
    """The transcript and its length after the write."""
    document: tuple[DocumentKey, str, int] | None = None
    """The document, its JSON body and its version after the write."""

    def settle(self, known: Known, at: Hashable | None) -> None:
        """Learn what the write stored, at data version `at` (read in its transaction); `None`: forget it."""
        if self.length is not None:
            conversation_id, length = self.length
            known.forget_length(conversation_id)
            known.learn_length(conversation_id, length, at)
        if self.document is not None:
            key, body, version = self.document
            known.forget_document(key)
            if at is not None:
                known.learn_document(key, Document(json.loads(body), version), at)


def _bounded(facts: dict[_K, _V]) -> dict[_K, _V]:
    if len(facts) >= _LIMIT:
        facts.clear()
    return facts
