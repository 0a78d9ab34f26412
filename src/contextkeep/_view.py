"""What `Session.prepare` returns: the messages to send, and how full the window is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from contextkeep._events import ContextStatus
from contextkeep._formats.spliced import ViewConversions
from contextkeep._lineage import Lineage, ViewList, lineage_of
from contextkeep._messages import Message

__all__ = ["View", "ViewConversions"]


@dataclass(frozen=True)
class View:
    """The prepared view for one model call."""

    built: Sequence[Message] = field(repr=False)
    """The messages as built: the view builder's list, which later views of the session may extend
    in place (no copy of the history per call). This view is its first `length`; read `neutral`."""
    tokens: int
    """Its prompt tokens (local count, tools included)."""
    status: ContextStatus
    """Budget, ratio and state of this view."""
    compacted: tuple[str, ...] = field(default=())
    """Layers that ran while preparing it (empty when nothing changed)."""
    conversions: ViewConversions = field(default_factory=ViewConversions, repr=False, compare=False)
    """The session's converted views: converting this one reuses what it shares with the last."""
    length: int = -1
    """How many messages it holds (by default all of `built` when it is made)."""

    def __post_init__(self) -> None:
        if self.length < 0:
            object.__setattr__(self, "length", len(self.built))

    @cached_property
    def neutral(self) -> list[Message]:
        """The view as provider-neutral messages: a list of its own (copied when first read)."""
        built, lineage = self.built, lineage_of(self.built)
        held = built if len(built) == self.length else built[: self.length]
        return ViewList(held, Lineage(lineage.token, self.length) if lineage is not None else None)

    @cached_property
    def messages(self) -> list[dict[str, Any]]:
        """OpenAI chat messages, ready for `chat.completions.create(messages=...)`.

        Equal to `to_openai(view.neutral)`, at the cost of what changed since the session's
        last view: the list is new, the dicts in it are shared with other views (copy one
        before changing it).
        """
        return self.conversions.openai.convert(self._messages())

    def anthropic(self) -> tuple[str | None, list[dict[str, Any]]]:
        """`(system, messages)` for the Anthropic Messages API (`to_anthropic(view.neutral)`).

        Converted incrementally like `messages`: the dicts are shared, copy one before changing it.
        """
        return self.conversions.anthropic.convert(self._messages())

    def _messages(self) -> Sequence[Message]:
        """`neutral` as it now is (a caller may change it), or `built` while neither was read nor grew."""
        if "neutral" not in self.__dict__ and len(self.built) == self.length:
            return self.built  # the common case: converted without a copy
        return self.neutral
