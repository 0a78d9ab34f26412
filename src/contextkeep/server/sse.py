"""Server-sent events: `event: <type>` and `data: <json>`, globally and per conversation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from contextkeep.server.context import context
from contextkeep.server.hub import EventHub, Published

__all__ = ["encode", "router"]

router = APIRouter(prefix="/api", tags=["events"])

_KEEPALIVE_SECONDS = 15.0


def encode(item: Published) -> bytes:
    """One event in the SSE wire format."""
    data = json.dumps(item.data, ensure_ascii=False, default=str)
    return f"event: {item.type}\ndata: {data}\n\n".encode()


async def _stream(request: Request, hub: EventHub, conversation: str | None) -> AsyncIterator[bytes]:
    async with hub.subscribe(conversation) as queue:
        yield b": connected\n\n"  # lets the client know the subscription is in place
        while not await request.is_disconnected():
            try:
                item = await asyncio.wait_for(queue.get(), _KEEPALIVE_SECONDS)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if item is None:  # the server is shutting down
                return
            yield encode(item)


def _response(request: Request, conversation: str | None) -> StreamingResponse:
    return StreamingResponse(
        _stream(request, context(request).hub, conversation),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/events", summary="Every conversation's events (text/event-stream)")
async def all_events(request: Request) -> StreamingResponse:
    """Typed engine events as server-sent events; polled ones carry `"synthesized": true`."""
    return _response(request, None)


@router.get(
    "/conversations/{conversation_id}/events", summary="One conversation's events (text/event-stream)"
)
async def conversation_events(request: Request, conversation_id: str) -> StreamingResponse:
    """Like `/api/events`, for one conversation (it need not exist yet)."""
    return _response(request, conversation_id)
