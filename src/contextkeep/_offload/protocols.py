"""What a user's own offloader implements: AgentScope's two methods, and optional extras.

Any object with `offload_context(session_id, msgs)` and `offload_tool_result(session_id,
tool_result)` is an :class:`Offloader`; no base class is needed. Each method may be
sync or async and returns a reference (e.g. a path or URL). The extra capabilities
are sub-protocols: an offloader that can also read its references back is a
:class:`ReadableOffloader`, one that also keeps action snapshots a
:class:`SnapshotOffloader`. `ContextManager(workspace=offloader)` wraps such an object
in an :class:`~contextkeep.OffloaderWorkspace`, which provides
whatever it lacks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from contextkeep._messages import Message

__all__ = ["Offloader", "ReadableOffloader", "SnapshotOffloader"]


@runtime_checkable
class Offloader(Protocol):
    """AgentScope's offloader: persists what leaves the context and returns references to it."""

    def offload_context(self, session_id: str, msgs: Sequence[Message], /) -> str | Awaitable[str]:
        """Persist messages compaction removed from the view; return a reference to them."""
        ...

    def offload_tool_result(self, session_id: str, tool_result: Message, /) -> str | Awaitable[str]:
        """Persist a tool result (a `tool` message: `tool_call_id` and full text); return a reference."""
        ...


@runtime_checkable
class ReadableOffloader(Offloader, Protocol):
    """An offloader that can also read back the references it returned."""

    def read(self, reference: str, /) -> str | Awaitable[str]:
        """The whole text behind a reference this offloader returned."""
        ...


@runtime_checkable
class SnapshotOffloader(Offloader, Protocol):
    """An offloader that also keeps DB-GPT's per-action snapshots."""

    def offload_snapshot(self, session_id: str, snapshot: Mapping[str, Any], /) -> str | Awaitable[str]:
        """Persist one action snapshot (its JSON document, `step` included); return a reference."""
        ...
