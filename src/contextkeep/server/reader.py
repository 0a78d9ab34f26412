"""Read-only sessions for the dashboard and the watcher, one per conversation, loaded incrementally."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from contextkeep._baseline import scope_key
from contextkeep._manager import ContextManager
from contextkeep._session import Session

__all__ = ["Reader"]

_KEPT = 64


class Reader:
    """Keeps up to 64 sessions that are only ever loaded and measured, never prepared.

    They are separate from the proxy's sessions, so reading never races a model call.
    """

    def __init__(self, manager: ContextManager, agent_id: str = "default", agent_version: str = "0") -> None:
        self.manager = manager
        self._agent = (agent_id, agent_version)
        self._sessions: OrderedDict[str, tuple[Session, asyncio.Lock]] = OrderedDict()

    @property
    def scope(self) -> str:
        """The usage scope these sessions read (the server's agent and model)."""
        return scope_key(*self._agent, self.manager.model.key)

    async def exists(self, conversation_id: str) -> bool:
        """Whether the store holds a transcript for the conversation."""
        return await self.manager.store.count_messages(conversation_id) > 0

    @asynccontextmanager
    async def open(self, conversation_id: str) -> AsyncIterator[Session]:
        """The conversation's session, caught up with the store, used by one reader at a time."""
        entry = self._sessions.get(conversation_id)
        if entry is None:
            agent_id, agent_version = self._agent
            session = self.manager.new_session(
                conversation_id, agent_id=agent_id, agent_version=agent_version
            )
            entry = self._sessions[conversation_id] = (session, asyncio.Lock())
            while len(self._sessions) > _KEPT:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(conversation_id)
        session, lock = entry
        async with lock:
            await session.load()
            yield session
