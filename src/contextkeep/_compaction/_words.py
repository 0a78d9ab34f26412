"""The words compaction weighs in what an agent wrote: its names, and what its calls ran."""

from __future__ import annotations

import functools
import json
import re

from contextkeep._messages import Message, ToolCall

__all__ = ["command_text", "names_in", "said"]

_NAME = re.compile(r"[A-Za-z_][\w]*(?:[./:-]\w+)*|\d{3,}")


def command_text(call: ToolCall) -> str:
    """A call's one string argument (a shell command), else its arguments as sent."""
    try:
        parsed = json.loads(call.arguments)
    except ValueError:
        return call.arguments
    if isinstance(parsed, dict) and len(parsed) == 1:
        (value,) = parsed.values()
        if isinstance(value, str):
            return value
    return call.arguments


def names_in(text: str) -> frozenset[str]:
    """The names in `text` a digest (or preview) weighs: identifiers and paths of 4+ characters, numbers.

    Remembered: every pass weighs the same transcript again, one line and one message at a time.
    """
    return _line_names(text) if len(text) <= _LINE_CHARS else _text_names(text)


_LINE_CHARS = 512
"""Texts up to this long are remembered by the many (a line); longer ones by the few (a message)."""


def _names(text: str) -> frozenset[str]:
    return frozenset(n for n in _NAME.findall(text) if len(n) >= 4 or n[0].isdigit())


_line_names = functools.lru_cache(maxsize=1 << 16)(_names)
_text_names = functools.lru_cache(maxsize=1 << 10)(_names)


def said(m: Message) -> str:
    """What a message says: its text, then each call's tool name and command, one a line."""
    return "\n".join([m.text, *(f"{c.name} {command_text(c)}" for c in m.tool_calls)])
