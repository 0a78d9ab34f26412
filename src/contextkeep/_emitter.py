"""One conversation's view of the event bus: every event it emits names the conversation."""

from __future__ import annotations

from dataclasses import replace

from contextkeep._events import Event, EventBus

__all__ = ["Emitter"]


class Emitter:
    """Emits events on a bus, stamped with one conversation's id."""

    def __init__(self, bus: EventBus, conversation_id: str) -> None:
        self.bus = bus
        """The bus the events go to."""
        self.conversation_id = conversation_id
        """The id every event is stamped with."""

    def emit(self, event: Event) -> None:
        """Deliver now (coroutine listeners are scheduled, see `EventBus.emit`)."""
        self.bus.emit(self._stamped(event))

    async def aemit(self, event: Event) -> None:
        """Deliver and await every coroutine listener."""
        await self.bus.aemit(self._stamped(event))

    def _stamped(self, event: Event) -> Event:
        if event.conversation_id == self.conversation_id:
            return event
        if not hasattr(event, "__dict__"):  # an event class with slots
            return replace(event, conversation_id=self.conversation_id)
        # A shallow copy with the id set: `dataclasses.replace` runs `__init__` again (~10 µs).
        stamped = object.__new__(type(event))
        stamped.__dict__.update(event.__dict__)
        object.__setattr__(stamped, "conversation_id", self.conversation_id)
        return stamped
