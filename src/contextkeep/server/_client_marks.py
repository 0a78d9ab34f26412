"""An Anthropic client's own `cache_control` breakpoints on its messages, put back on the view.

A client (Claude Code) marks blocks of its latest messages and moves the marks from call to
call, so they are not part of the transcript: each request's marks are read again, by the
message they are on (its content key) and the block's place among what that message
contributes (`message_blocks`). A view message that reads as the client's message did gets
the same marks on the same blocks; one that compaction changed gets none (its prefix is new
to the upstream's cache anyway).

Only the messages that hold the marks are converted: the request body says how many
`cache_control` keys it has, and the messages are read from the last until they are found.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from contextkeep._formats.anthropic import from_anthropic, message_blocks
from contextkeep._messages import Message

__all__ = ["ClientMarks", "apply_marks", "client_marks"]

_MARK: Final = b'"cache_control"'

ClientMarks = dict[str, list[tuple[int, Any]]]
"""Per message content key: (block index in its `message_blocks`, the client's `cache_control`)."""


def _category(block: Mapping[str, Any]) -> str:
    kind = str(block.get("type"))
    if kind in ("thinking", "redacted_thinking", "tool_use", "tool_result"):
        return kind
    return "content"  # text, image, document: the message's parts, in order


def _marks_of(raw: Mapping[str, Any]) -> ClientMarks:
    """The marks on one client message, placed on the messages it converts to."""
    blocks = raw.get("content")
    if not isinstance(blocks, list) or not any(
        isinstance(b, Mapping) and "cache_control" in b for b in blocks
    ):
        return {}
    converted = from_anthropic([raw])
    results = [m for m in converted if m.role == "tool"]
    main = next((m for m in converted if m.role != "tool"), None)
    made = {"tool_result": [(m, 0) for m in results]}
    if main is not None:
        for i, b in enumerate(message_blocks(main)):
            made.setdefault(_category(b), []).append((main, i))
    seen: dict[str, int] = {}
    out: ClientMarks = {}
    for block in blocks:
        category = _category(block)
        place = seen[category] = seen.get(category, -1) + 1
        targets = made.get(category, [])
        if "cache_control" in block and place < len(targets):
            message, index = targets[place]
            out.setdefault(message.key, []).append((index, block["cache_control"]))
    return out


def client_marks(raw_body: bytes, messages: Sequence[Any], system: Any, tools: Any) -> ClientMarks:
    """The client's marks on its messages (none read when the body has none beyond `system` and `tools`)."""
    elsewhere = json.dumps([system, tools]).encode().count(_MARK)
    left = raw_body.count(_MARK) - elsewhere
    out: ClientMarks = {}
    for raw in reversed(messages):
        if left <= 0:
            break
        if not isinstance(raw, Mapping):
            continue
        left -= json.dumps(raw).encode().count(_MARK)
        for key, marks in _marks_of(raw).items():
            out.setdefault(key, marks)
    return out


def apply_marks(view: Sequence[Message], marks: ClientMarks, room: int) -> dict[int, list[tuple[int, Any]]]:
    """Which view messages get which marks: each client message's on its last copy, the latest `room` kept."""
    left = dict(marks)
    chosen: dict[int, list[tuple[int, Any]]] = {}
    for position in range(len(view) - 1, -1, -1):
        if room <= 0:
            break
        found = left.pop(view[position].key, None)
        if found:
            chosen[position] = found[-room:]
            room -= len(chosen[position])
    return chosen
