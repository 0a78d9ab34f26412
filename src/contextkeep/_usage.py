"""Provider-reported token usage, parsed from each provider's reply shape."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Usage", "UsageSource"]


class UsageSource(enum.StrEnum):
    """Whether a reply carried the provider's usage."""

    PROVIDER_CONFIRMED = "PROVIDER_CONFIRMED"
    """The provider reported usage."""
    UNAVAILABLE = "UNAVAILABLE"
    """The reply carried no usage."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one model call, as the provider reported it (fields absent stay `None`)."""

    input_tokens: int | None = None
    """Prompt tokens."""
    output_tokens: int | None = None
    """Completion tokens."""
    total_tokens: int | None = None
    """Total tokens."""
    cached_tokens: int | None = None
    """Prompt tokens served from the provider's prefix cache."""
    cache_write_tokens: int | None = None
    """Prompt tokens written to the cache (Anthropic)."""

    @property
    def source(self) -> UsageSource:
        """`PROVIDER_CONFIRMED` when any figure was reported."""
        if self.input_tokens is None and self.output_tokens is None and self.total_tokens is None:
            return UsageSource.UNAVAILABLE
        return UsageSource.PROVIDER_CONFIRMED

    @property
    def complete(self) -> bool:
        """A total, or both prompt and completion: enough to establish a baseline (Agents-Flex)."""
        return self.total_tokens is not None or (
            self.input_tokens is not None and self.output_tokens is not None
        )

    @property
    def baseline(self) -> int | None:
        """Tokens the next call starts from: this call's total (prompt + completion), when complete."""
        if self.total_tokens is not None:
            return self.total_tokens
        if self.input_tokens is not None and self.output_tokens is not None:
            return self.input_tokens + self.output_tokens
        return None

    @classmethod
    def from_openai(cls, usage: Mapping[str, Any] | None) -> Usage:
        """From an OpenAI-style `usage` object (also DeepSeek, vLLM, Ollama's OpenAI endpoint)."""
        if not usage:
            return cls()
        details = usage.get("prompt_tokens_details") or {}
        cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else None
        return cls(
            input_tokens=_int(usage.get("prompt_tokens")),
            output_tokens=_int(usage.get("completion_tokens")),
            total_tokens=_int(usage.get("total_tokens")),
            cached_tokens=cached if cached is not None else _int(usage.get("prompt_cache_hit_tokens")),
        )

    @classmethod
    def from_anthropic(cls, usage: Mapping[str, Any] | None) -> Usage:
        """From an Anthropic `usage` object; input counts cache reads and writes too."""
        if not usage:
            return cls()
        base = _int(usage.get("input_tokens"))
        read = _int(usage.get("cache_read_input_tokens"))
        write = _int(usage.get("cache_creation_input_tokens"))
        prompt = None if base is None else base + (read or 0) + (write or 0)
        return cls(
            input_tokens=prompt,
            output_tokens=_int(usage.get("output_tokens")),
            cached_tokens=read,
            cache_write_tokens=write,
        )
