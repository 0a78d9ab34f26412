"""The model adapter protocol: one call of a model on a prepared view."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from contextkeep._capabilities import ModelSpec
from contextkeep._messages import Message
from contextkeep._usage import Usage

__all__ = ["ModelAdapter", "ModelReply", "SpecifiedAdapter", "adapter_spec"]


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
    """Calls one model. Overflow errors are raised as `ContextOverflowError` with their phase.

    A user's adapter should also give a `spec` with a stable key (a :class:`SpecifiedAdapter`,
    as every built-in adapter is); one without it still runs, keyed by its class name with
    capacity unknown (see :func:`adapter_spec`).
    """

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        local_prompt_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        """Send the view; return the reply with usage. Raises `ContextOverflowError` or `ModelError`.

        `local_prompt_tokens` is our own count of the view (`View.tokens`; `Session.complete`
        always passes it). A reply whose reported prompt shows it was cut to the window
        without an error (Ollama) must raise `ContextOverflowError` (phase INPUT_CONTEXT)
        instead of being returned: see :func:`~contextkeep.models.overflow.check_silent_truncation`.
        """
        ...


@runtime_checkable
class SpecifiedAdapter(ModelAdapter, Protocol):
    """A model adapter that names its model and what it holds."""

    @property
    def spec(self) -> ModelSpec:
        """Model key and capacity (window and max output `None` when unknown, never guessed)."""
        ...


def adapter_spec(adapter: ModelAdapter) -> ModelSpec:
    """The adapter's model spec; without one, its class name keys the model (Agents-Flex's fallback).

    The fallback knows no capacity, so no ratio is computed for it (capacity is never guessed).
    """
    spec = adapter.spec if isinstance(adapter, SpecifiedAdapter) else None
    return spec if isinstance(spec, ModelSpec) else ModelSpec(type(adapter).__name__)
