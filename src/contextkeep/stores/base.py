"""What a state store keeps, and the protocol every backend implements.

Three things per conversation: the **transcript** (append-only messages, each
with its position), **documents** (versioned JSON: the compaction state under
kind `compaction`, usage baselines under kind `usage` with a scope key), and
**leases** (so two instances do not pay for the same summary).

Every write is compare-and-set: `append` names the transcript length it expects
and `save_document` the version it read. A stale expectation returns `False`
and writes nothing; read-then-blind-write is never done. Any other failure
raises (:class:`~contextkeep.StoreError` from the built-in stores).

Three capabilities are optional, each a typed sub-protocol of :class:`Store`: a
:class:`NamedStore` names its backend (`sqlite`, `redis`, ...), which events and
metrics label failed saves with; a :class:`MigratableStore` creates or upgrades
its schema on demand (`contextkeep migrate`); an :class:`AtomicStore` appends and
saves a document in one transaction (a recorded reply and its usage: one commit).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from contextkeep._events import StoreSaveFailed
from contextkeep._messages import Message

__all__ = [
    "AtomicStore",
    "Document",
    "DocumentWrite",
    "MigratableStore",
    "NamedStore",
    "Store",
    "backend_name",
    "reporting_failure",
]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Document:
    """A versioned JSON document."""

    data: Mapping[str, Any]
    """The content."""
    version: int
    """Version of this content; 0 means "never saved"."""


@dataclass(frozen=True, slots=True)
class DocumentWrite:
    """One `save_document` call, made together with an append (see :class:`AtomicStore`)."""

    kind: str
    """The document kind."""
    data: Mapping[str, Any]
    """The content to save."""
    expected_version: int
    """The version the save expects stored (it writes `expected_version + 1`)."""
    scope: str = ""
    """The document scope."""


@runtime_checkable
class Store(Protocol):
    """A conversation state store (memory, SQLite, PostgreSQL, MySQL/MariaDB, Redis)."""

    async def append(
        self, conversation_id: str, messages: Sequence[Message], *, expected_length: int
    ) -> bool:
        """Append `messages` if exactly `expected_length` are stored; `False` (nothing written) otherwise.

        Idempotent: if exactly these messages (same ids and contents) are already stored from
        position `expected_length` on, a retry after a lost reply, it returns `True` and writes nothing.
        """
        ...

    async def load_messages(
        self, conversation_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Message]:
        """Messages from position `after` on (at most `limit`), in order."""
        ...

    async def count_messages(self, conversation_id: str) -> int:
        """How many messages the transcript holds."""
        ...

    async def load_document(self, conversation_id: str, kind: str, scope: str = "") -> Document:
        """The document, or an empty one with version 0."""
        ...

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
        ...

    async def list_scopes(self, conversation_id: str, kind: str) -> list[str]:
        """The scopes holding a saved document of `kind` for the conversation, sorted."""
        ...

    async def acquire_lease(self, conversation_id: str, name: str, owner: str, ttl_ms: int) -> bool:
        """Take (or renew, for the same owner) a lease; an expired lease is taken over."""
        ...

    async def release_lease(self, conversation_id: str, name: str, owner: str) -> None:
        """Give a lease back (only its owner can)."""
        ...

    async def list_conversations(self) -> list[str]:
        """Every conversation id with a transcript."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class NamedStore(Store, Protocol):
    """A store that names its backend."""

    @property
    def backend(self) -> str:
        """`sqlite`, `postgresql`, `mysql`, `redis`, `memory`, ...: labels its failed saves."""
        ...


@runtime_checkable
class MigratableStore(Store, Protocol):
    """A store with a schema that can be created or upgraded before instances use it."""

    async def migrate(self) -> int:
        """Create or upgrade the schema whatever the store's own settings say; the version reached."""
        ...


@runtime_checkable
class AtomicStore(Store, Protocol):
    """A store that appends and saves a document in one transaction."""

    async def append_and_save(
        self,
        conversation_id: str,
        messages: Sequence[Message],
        *,
        expected_length: int,
        document: DocumentWrite,
    ) -> bool:
        """`append` and `save_document(document)` as one write: `True` when both were written.

        `False`, and nothing written, when either expectation is stale, or the batch is already
        stored (a retry): the caller then makes the two writes one by one, which tells which
        one lost and keeps `append` idempotent.
        """
        ...


def backend_name(store: Store) -> str:
    """`store`'s backend (see :class:`NamedStore`), or its class name for a store without one."""
    return str(store.backend) if isinstance(store, NamedStore) else type(store).__name__


async def reporting_failure(
    store: Store, kind: str, write: Awaitable[_T], report: Callable[[StoreSaveFailed], Awaitable[None]]
) -> _T:
    """Await `write` (a save of `kind` to `store`); if it raises, `report` the failure, then re-raise.

    A lost compare-and-set is a result, not a failure: only an exception is reported.
    """
    try:
        return await write
    except Exception as error:
        await report(StoreSaveFailed(store=backend_name(store), kind=kind, error=str(error)))
        raise
