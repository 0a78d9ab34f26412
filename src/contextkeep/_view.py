"""What `Session.prepare` returns: the messages to send, and how full the window is."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from contextkeep._events import ContextStatus
from contextkeep._formats.spliced import ViewConversions
from contextkeep._messages import Message

__all__ = ["View", "ViewConversions"]


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
    conversions: ViewConversions = field(default_factory=ViewConversions, repr=False, compare=False)
    """The session's converted views: converting this one reuses what it shares with the last."""

    @cached_property
    def messages(self) -> list[dict[str, Any]]:
        """OpenAI chat messages, ready for `chat.completions.create(messages=...)`.

        Equal to `to_openai(view.neutral)`, at the cost of what changed since the session's
        last view: the list is new, the dicts in it are shared with other views (copy one
        before changing it).
        """
        return self.conversions.openai.convert(self.neutral)

    def anthropic(self) -> tuple[str | None, list[dict[str, Any]]]:
        """`(system, messages)` for the Anthropic Messages API (`to_anthropic(view.neutral)`).

        Converted incrementally like `messages`: the dicts are shared, copy one before changing it.
        """
        return self.conversions.anthropic.convert(self.neutral)
