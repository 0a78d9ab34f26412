"""Agents-Flex's names for our events, for listeners and UIs written against Agents-Flex.

Agents-Flex hands a listener an event whose type comes from its catalogue
(`MODEL_COMPLETED`, `CONTEXT_COMPRESSION_REQUIRED`, ...) and whose data map has
camelCase keys (`nextCallBaselineTokens`, `usageBaselineValid`, ...).
:class:`AgentsFlexEvent` is that catalogue, mapped onto our event classes in both
directions; `Event.to_agents_flex()` renders one of our events in that shape.
"""

from __future__ import annotations

import enum
from typing import Any

from contextkeep._event_names import agents_flex_fields
from contextkeep._events import (
    CompressionCompleted,
    CompressionFailed,
    CompressionRequired,
    CompressionStarted,
    Event,
    ModelCompleted,
)

__all__ = ["AgentsFlexEvent", "agents_flex_dict"]


class AgentsFlexEvent(enum.StrEnum):
    """The Agents-Flex event catalogue; each member is one of our event classes.

    `AgentsFlexEvent.of(event)` goes from ours to theirs, `member.event_class` and
    `member.event_type` back (subscribe with `bus.subscribe(fn, member.event_type)`).
    """

    MODEL_COMPLETED = "MODEL_COMPLETED"
    """A model call finished: :class:`~contextkeep.ModelCompleted` (`model.completed`)."""
    CONTEXT_COMPRESSION_REQUIRED = "CONTEXT_COMPRESSION_REQUIRED"
    """Compaction scheduled before the next call: :class:`~contextkeep.CompressionRequired`."""
    CONTEXT_COMPRESSION_STARTED = "CONTEXT_COMPRESSION_STARTED"
    """Compaction started: :class:`~contextkeep.CompressionStarted`."""
    CONTEXT_COMPRESSION_COMPLETED = "CONTEXT_COMPRESSION_COMPLETED"
    """Compaction finished: :class:`~contextkeep.CompressionCompleted`."""
    CONTEXT_COMPRESSION_FAILED = "CONTEXT_COMPRESSION_FAILED"
    """Compaction (or a summary) failed: :class:`~contextkeep.CompressionFailed`."""

    @property
    def event_class(self) -> type[Event]:
        """Our event class for this Agents-Flex type."""
        return _CLASSES[self]

    @property
    def event_type(self) -> str:
        """Our `type` string for this Agents-Flex type (what `EventBus.subscribe` filters on)."""
        return self.event_class.type

    @classmethod
    def of(cls, event: Event | type[Event] | str) -> AgentsFlexEvent | None:
        """The Agents-Flex type of `event` (an event, its class or its `type`); `None` if it has none."""
        kind = event if isinstance(event, str) else event.type
        return _BY_TYPE.get(kind)


_CLASSES: dict[AgentsFlexEvent, type[Event]] = {
    AgentsFlexEvent.MODEL_COMPLETED: ModelCompleted,
    AgentsFlexEvent.CONTEXT_COMPRESSION_REQUIRED: CompressionRequired,
    AgentsFlexEvent.CONTEXT_COMPRESSION_STARTED: CompressionStarted,
    AgentsFlexEvent.CONTEXT_COMPRESSION_COMPLETED: CompressionCompleted,
    AgentsFlexEvent.CONTEXT_COMPRESSION_FAILED: CompressionFailed,
}
_BY_TYPE = {cls.type: member for member, cls in _CLASSES.items()}


def agents_flex_dict(event: Event) -> dict[str, Any]:
    """`event` as Agents-Flex delivers it (the same as `event.to_agents_flex()`)."""
    return agents_flex_fields(event.to_dict())
