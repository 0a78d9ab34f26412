"""The bus that delivers events to listeners.

Listeners may be plain functions or coroutine functions. `emit` (sync) calls
plain listeners at once and schedules coroutine listeners on the running loop;
`aemit` awaits them. A listener that raises is logged and never breaks the engine.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contextkeep._events import Event

__all__ = ["EventBus", "Listener"]

logger = logging.getLogger("contextkeep.events")

Listener = Callable[["Event"], None] | Callable[["Event"], Awaitable[None]]


class EventBus:
    """Delivers events to sync and async listeners, optionally filtered by type."""

    def __init__(self) -> None:
        self._listeners: list[tuple[Listener, frozenset[str] | None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_type: dict[str, tuple[Listener, ...]] = {}
        """Each event type's listeners, as of the last change (events outnumber subscriptions)."""

    def subscribe(self, listener: Listener, *types: str) -> Callable[[], None]:
        """Register `listener` (for `types`, or all); returns a function that unsubscribes it."""
        entry = (listener, frozenset(types) or None)
        self._listeners.append(entry)
        self._by_type = {}

        def unsubscribe() -> None:
            if entry in self._listeners:
                self._listeners.remove(entry)
                self._by_type = {}

        return unsubscribe

    def emit(self, event: Event) -> None:
        """Deliver now; coroutine listeners are scheduled on the running loop, if any."""
        for listener in self._targets(event):
            result = _call(listener, event)
            if result is not None and inspect.isawaitable(result):
                try:
                    task = asyncio.get_running_loop().create_task(_guard(result, listener))
                except RuntimeError:  # no loop: run it to completion here
                    asyncio.run(_guard(result, listener))
                    continue
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def aemit(self, event: Event) -> None:
        """Deliver and await every coroutine listener."""
        for listener in self._targets(event):
            result = _call(listener, event)
            if result is not None and inspect.isawaitable(result):
                await _guard(result, listener)

    def _targets(self, event: Event) -> tuple[Listener, ...]:
        # A tuple: a listener that subscribes or unsubscribes while one is delivered changes the next.
        found = self._by_type.get(event.type)
        if found is None:
            found = tuple(fn for fn, types in self._listeners if types is None or event.type in types)
            self._by_type[event.type] = found
        return found


def _call(listener: Listener, event: Event) -> Any:
    try:
        return listener(event)
    except Exception:
        logger.exception("event listener %r failed on %s", listener, event.type)
        return None


async def _guard(result: Awaitable[Any], listener: Listener) -> None:
    try:
        await result
    except Exception:
        logger.exception("async event listener %r failed", listener)
