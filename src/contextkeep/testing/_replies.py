"""What the fake model answers: scripted replies, and the counted completion built from one."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Completion",
    "Reply",
    "Responder",
    "ToolCallSpec",
    "UsageMode",
    "default_responder",
]

UsageMode = Literal["full", "omit", "prompt_only", "completion_only"]
"""How usage is reported: all fields, no usage at all, or only the prompt or completion side."""


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool call the fake model makes."""

    name: str
    """Name of the tool (function) to call."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """Arguments, sent as a JSON string (OpenAI) or an `input` object (Anthropic)."""

    def arguments_json(self) -> str:
        """The arguments as the compact JSON string OpenAI sends."""
        return json.dumps(dict(self.arguments), ensure_ascii=False)


@dataclass(frozen=True)
class Reply:
    """One scripted answer of the fake model."""

    text: str = ""
    """Assistant text; empty with tool calls gives `content: null` (OpenAI) / no text block."""
    tool_calls: Sequence[ToolCallSpec] = ()
    """Tool calls, in order; ids are assigned by the server (`call_0001`, `toolu_0001`, ...)."""
    reasoning: str | None = None
    """Reasoning text: `reasoning_content` (OpenAI-compatible) or a `thinking` block (Anthropic)."""


Responder = Callable[[Mapping[str, Any]], Reply]
"""Builds a reply from the parsed request body."""


def default_responder(body: Mapping[str, Any]) -> Reply:
    """Answers every request with the text ``ok``."""
    del body
    return Reply(text="ok")


@dataclass(frozen=True)
class Completion:
    """A reply ready to render: ids assigned, tokens counted, cut to `max_tokens` if needed."""

    number: int
    """Sequence number of the response, for its id (`chatcmpl-0001`, `msg_0001`)."""
    model: str
    """Model name echoed back."""
    reply: Reply
    """The reply as sent (text truncated and tool calls dropped when cut by `max_tokens`)."""
    tool_numbers: tuple[int, ...]
    """Sequence number of each tool call, for its id."""
    truncated: bool
    """Whether `max_tokens` cut the reply (finish reason `length` / `max_tokens`)."""
    prompt_tokens: int
    """Prompt tokens reported in usage."""
    completion_tokens: int
    """Completion tokens reported in usage."""
    usage_mode: UsageMode
    """Which usage fields to report."""

    def usage(self, prompt_key: str, completion_key: str, total_key: str | None) -> Any:
        """Usage object in the provider's field names, or None when usage is omitted."""
        fields: dict[str, int] = {}
        if self.usage_mode in ("full", "prompt_only"):
            fields[prompt_key] = self.prompt_tokens
        if self.usage_mode in ("full", "completion_only"):
            fields[completion_key] = self.completion_tokens
        if self.usage_mode == "full" and total_key:
            fields[total_key] = self.prompt_tokens + self.completion_tokens
        return fields if self.usage_mode != "omit" else None
