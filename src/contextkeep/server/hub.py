"""Fan-out of events to server-sent-event subscribers, per conversation or global."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from contextkeep._events import Event

__all__ = ["EventHub", "Published"]

logger = logging.getLogger("contextkeep.server")

_QUEUE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class Published:
    """One event as sent to browsers."""

    type: str
    """The event type (`context.status`, ...); the SSE `event:` field."""
    conversation_id: str
    """The conversation it concerns."""
    data: dict[str, Any]
    """The event's JSON (`Event.to_dict()`, plus `synthesized` for polled events)."""


class EventHub:
    """Delivers published events to every subscriber whose filter matches.

    A subscriber that falls more than 1,024 events behind loses the oldest ones
    (a browser tab in the background must never stall the engine). Publishing is
    thread-safe: an event emitted by a session running in another thread or loop is
    handed to each subscriber's own loop.
    """

    def __init__(self) -> None:
        self._subscribers: set[_Subscriber] = set()
        self.baseline: Callable[[str | None], Awaitable[None]] | None = None
        """Takes what the store holds as history for a new stream (the store watcher's), if set."""

    @property
    def subscribers(self) -> int:
        """How many streams are open."""
        return len(self._subscribers)

    def watched(self) -> frozenset[str] | None:
        """The conversations some open stream follows; `None` when one follows every conversation."""
        wanted = {conversation for _, conversation, _ in self._subscribers}
        return None if None in wanted else frozenset(c for c in wanted if c is not None)

    def publish_event(self, event: Event, *, synthesized: bool = False) -> None:
        """Publish an engine event (an EventBus listener)."""
        data = event.to_dict()
        data["synthesized"] = synthesized
        self.publish(Published(event.type, event.conversation_id, data))

    def close(self) -> None:
        """End every open stream (the server is shutting down); thread-safe."""
        self.publish(None)

    def publish(self, item: Published | None) -> None:
        """Deliver `item` to every matching subscriber without waiting (`None` ends the streams)."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for queue, conversation, loop in list(self._subscribers):
            if item is not None and conversation is not None and conversation != item.conversation_id:
                continue
            if loop is running:
                _put(queue, item)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(_put, queue, item)

    @asynccontextmanager
    async def subscribe(
        self, conversation: str | None = None
    ) -> AsyncIterator[asyncio.Queue[Published | None]]:
        """A queue receiving the events of `conversation` (all when `None`) while the block runs.

        `None` from the queue means the hub closed: the stream should end.
        """
        entry = (asyncio.Queue[Published | None](_QUEUE_SIZE), conversation, asyncio.get_running_loop())
        self._subscribers.add(entry)
        try:
            if self.baseline is not None:  # from here on, what the store changes is news
                await self.baseline(conversation)
            yield entry[0]
        finally:
            self._subscribers.discard(entry)


_Subscriber = tuple[asyncio.Queue[Published | None], str | None, asyncio.AbstractEventLoop]


def _put(queue: asyncio.Queue[Published | None], item: Published | None) -> None:
    if queue.full():
        queue.get_nowait()
        logger.warning("event stream fell behind; dropped its oldest event")
    queue.put_nowait(item)
