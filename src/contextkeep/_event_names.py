"""Agents-Flex's names for our event types, and an event's fields in its shape (camelCase `data`).

Kept apart from :mod:`contextkeep.events` (which renders through it) and from
:mod:`contextkeep._agents_flex` (the public enum over our classes), so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["AGENTS_FLEX_NAMES", "agents_flex_fields"]

AGENTS_FLEX_NAMES: Mapping[str, str] = {
    "model.completed": "MODEL_COMPLETED",
    "context.compression.required": "CONTEXT_COMPRESSION_REQUIRED",
    "context.compression.started": "CONTEXT_COMPRESSION_STARTED",
    "context.compression.completed": "CONTEXT_COMPRESSION_COMPLETED",
    "context.compression.failed": "CONTEXT_COMPRESSION_FAILED",
}
"""Our event `type` → the Agents-Flex event type (the seed's catalogue)."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def agents_flex_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """An event's `to_dict()` as Agents-Flex delivers it: `type`, `conversationId`, `timestamp`, `data`.

    `type` is the Agents-Flex name, or our own `type` for an event outside its catalogue.
    Fields without a value are left out of `data`: Agents-Flex shows `baselineRatio` and
    `remainingBaselineTokens` only while the baseline is valid and capacity known, and a
    UI must not read a missing figure as 0.
    """
    rest = dict(fields)
    kind = rest.pop("type")
    out: dict[str, Any] = {
        "type": AGENTS_FLEX_NAMES.get(kind, kind),
        "conversationId": rest.pop("conversation_id"),
        "timestamp": rest.pop("timestamp"),
    }
    out["data"] = {_camel(name): value for name, value in rest.items() if value is not None}
    return out
