"""What `Session.prepare` returns: the messages to send, and how full the window is."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from contextkeep._events import ContextStatus
from contextkeep._formats import to_anthropic, to_openai
from contextkeep._messages import Message

__all__ = ["View"]


@dataclass(frozen=True)
class View:
    """The prepared view for one model call."""

    neutral: list[Message]
    """The view as provider-neutral messages."""
    tokens: int
    """Its prompt tokens (local count, tools included)."""
    status: ContextStatus
    """Budget, ratio and state of this view."""
    compacted: tuple[str, ...] = field(default=())
    """Layers that ran while preparing it (empty when nothing changed)."""

    @cached_property
    def messages(self) -> list[dict[str, Any]]:
        """OpenAI chat messages, ready for `chat.completions.create(messages=...)`."""
        return to_openai(self.neutral)

    def anthropic(self) -> tuple[str | None, list[dict[str, Any]]]:
        """`(system, messages)` for the Anthropic Messages API."""
        return to_anthropic(self.neutral)
