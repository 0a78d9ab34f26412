"""The model adapter protocol: one call of a model on a prepared view."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from contextkeep.capabilities import ModelSpec
from contextkeep.messages import Message
from contextkeep.usage import Usage

__all__ = ["ModelAdapter", "ModelReply"]


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What a model call returned."""

    message: Message
    """The assistant message (text, tool calls, reasoning)."""
    usage: Usage = field(default_factory=Usage)
    """The provider's usage; empty (source UNAVAILABLE) when the reply carried none."""
    finish_reason: str | None = None
    """Why generation stopped (`stop`, `tool_calls`, `length`, ...)."""
    model: str | None = None
    """The model name the provider reported."""
    raw: Any = None
    """The SDK's own response object, for callers who need more."""


@runtime_checkable
class ModelAdapter(Protocol):
    """Calls one model. Overflow errors are raised as `ContextOverflowError` with their phase."""

    @property
    def spec(self) -> ModelSpec:
        """Model key and capacity (window and max output `None` when unknown, never guessed)."""
        ...

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        """Send the view; return the reply with usage. Raises `ContextOverflowError` or `ModelError`."""
        ...
