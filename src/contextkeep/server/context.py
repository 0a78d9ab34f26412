"""What every route reaches through `request.app.state.ck`."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import HTTPException, Request

from contextkeep._manager import ContextManager
from contextkeep.server.hub import EventHub
from contextkeep.server.proxy import Proxy
from contextkeep.server.reader import Reader

__all__ = ["ServerContext", "context", "known_conversation"]


@dataclass
class ServerContext:
    """The app's shared parts."""

    manager: ContextManager
    """Budget, counter, store and workspace of every conversation the server shows or proxies."""
    hub: EventHub
    """Events for the server-sent-event streams."""
    reader: Reader
    """Read-only sessions for the API and the watcher."""
    proxy: Proxy | None
    """The proxy, when an upstream is configured."""


def context(request: Request) -> ServerContext:
    """FastAPI dependency: the app's shared parts."""
    ck: ServerContext = request.app.state.ck
    return ck


async def known_conversation(request: Request, conversation_id: str) -> str:
    """FastAPI dependency: the path's conversation id, or 404 when the store has no transcript for it."""
    if not await context(request).reader.exists(conversation_id):
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    return conversation_id
