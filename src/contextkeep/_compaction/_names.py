"""The names compaction writes into records and events: layers and the reasons a pass runs.

Both are `StrEnum`s: a member *is* its string, so records and events read and compare
as before, and a user's own layer is simply another string.
"""

from __future__ import annotations

import enum

__all__ = ["CompressionReason", "LayerName"]


class LayerName(enum.StrEnum):
    """The built-in layers (a registered layer of your own has any other name)."""

    MASK = "L1"
    """Observation masking: old tool outputs become a preview and a reference."""
    DROP = "L2"
    """Round dropping: whole old rounds leave the view behind one marker."""
    SUMMARY = "L3"
    """Summary: old rounds become one structured summary."""
    REACTIVE = "L4"
    """Reactive: after a provider overflow, down to the system prompt and the last rounds."""
    PIPELINE = "pipeline"
    """Not a layer: the whole pass, in events about no single layer."""


class CompressionReason(enum.StrEnum):
    """Why a compaction pass runs."""

    BUDGET = "BUDGET"
    """The local count reached the trigger."""
    THRESHOLD_REACHED = "THRESHOLD_REACHED"
    """Provider-confirmed usage reached the compression threshold (a deferred pass)."""
    MANUAL = "MANUAL"
    """Asked for (`Session.compress`)."""
    OVERFLOW_RECOVERY = "OVERFLOW_RECOVERY"
    """The provider rejected the prompt as too long."""
