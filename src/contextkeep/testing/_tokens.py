"""Default prompt counting: tiktoken ``o200k_base`` over a plain rendering of the request body.

The figure only has to be a real, stable token count (not any provider's exact one), so both
OpenAI and Anthropic bodies are flattened into text the same way. Replies are counted (and cut
at `max_tokens`) with the server's encoder when it has one, else in ``o200k_base`` too.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import tiktoken

from contextkeep._tokens.encoders import Encoder

__all__ = [
    "MESSAGE_FRAMING_TOKENS",
    "content_text",
    "count_output",
    "count_text",
    "default_counter",
    "truncate_output",
    "truncate_text",
]

MESSAGE_FRAMING_TOKENS = 3
"""Tokens charged per message for role and separators (OpenAI's cookbook estimate); also once
for priming the reply."""

# Binary parts are charged as a short tag: their base64 would dominate the count and mean nothing.
_OPAQUE_PARTS = frozenset({"image", "image_url", "input_audio", "document", "file"})


@functools.cache
def _encoding() -> Any:
    return tiktoken.get_encoding("o200k_base")


def count_text(text: str) -> int:
    """Tokens of `text` in ``o200k_base``; special-token strings count as plain text."""
    return len(_encoding().encode(text, disallowed_special=()))


def truncate_text(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` that fits in `max_tokens` tokens."""
    return str(_encoding().decode(_encoding().encode(text, disallowed_special=())[:max_tokens]))


def count_output(text: str, encoder: Encoder | None) -> int:
    """Tokens of reply `text` in `encoder`, or in ``o200k_base`` without one."""
    return encoder.count(text) if encoder is not None else count_text(text)


def truncate_output(text: str, max_tokens: int, encoder: Encoder | None) -> str:
    """The longest prefix of reply `text` within `max_tokens` tokens of `encoder` (else ``o200k_base``)."""
    if encoder is None:
        return truncate_text(text, max_tokens)
    low, high = 0, len(text)  # binary search: an encoder need not decode
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if encoder.count(text[:mid]) <= max_tokens else (low, mid - 1)
    return text[:low]


def content_text(content: Any) -> str:
    """Flatten OpenAI or Anthropic message content (a string or a list of parts) into text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_text(part) for part in content)
    return json.dumps(content, sort_keys=True)


def _part_text(part: Any) -> str:
    if not isinstance(part, Mapping):
        return str(part)
    kind = part.get("type")
    if kind == "text":
        return str(part.get("text", ""))
    if kind == "thinking":
        return str(part.get("thinking", ""))
    if kind == "tool_use":
        return f"{part.get('name', '')} {json.dumps(part.get('input', {}), sort_keys=True)}"
    if kind == "tool_result":
        return content_text(part.get("content"))
    if kind in _OPAQUE_PARTS:
        return f"[{kind}]"
    return json.dumps(part, sort_keys=True)


def _message_text(message: Any) -> str:
    if not isinstance(message, Mapping):
        return str(message)
    lines = [str(message.get("role", "")), content_text(message.get("content"))]
    lines += [content_text(message.get("reasoning_content"))] if "reasoning_content" in message else []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, Mapping) else {}
        lines.append(f"{function.get('name', '')} {function.get('arguments', '')}")
    return "\n".join(lines)


def default_counter(body: Mapping[str, Any]) -> int:
    """Prompt tokens of a chat-completions or messages request: messages, system and tools."""
    texts = [content_text(body["system"])] if body.get("system") else []
    texts += [_message_text(message) for message in body.get("messages") or []]
    total = sum(count_text(text) + MESSAGE_FRAMING_TOKENS for text in texts)
    if body.get("tools"):
        total += count_text(json.dumps(body["tools"], sort_keys=True))
    return total + MESSAGE_FRAMING_TOKENS
