"""The persisted compaction state: everything the view is derived from besides the transcript.

It is immutable; each compaction produces a new state with `version + 1`, saved
with compare-and-set on the version. It serialises to plain JSON.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from contextkeep._summarizers.base import Summary

__all__ = ["CompactionRecord", "CompactionState", "ProgressStep", "Summary"]


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """One compaction, for audit and replay."""

    layer: str
    """The layer that made the change: `L1`...`L4` (`LayerName`), or a registered layer's name."""
    reason: str
    """Why the pass ran: BUDGET, THRESHOLD_REACHED, OVERFLOW_RECOVERY or MANUAL (`CompressionReason`)."""
    tokens_before: int
    """View tokens before."""
    tokens_after: int
    """View tokens after."""
    first: int = 0
    """First transcript index affected."""
    last: int = 0
    """One past the last transcript index affected."""
    references: tuple[str, ...] = ()
    """Where the removed content was offloaded."""
    at: float = field(default_factory=time.time)
    """Unix time."""


@dataclass(frozen=True, slots=True)
class ProgressStep:
    """A completed action, shown in the system prompt's task progress."""

    step: int
    """Step number."""
    action: str
    """What was done."""
    summary: str
    """One line about the outcome."""
    reference: str = ""
    """The step's snapshot."""


@dataclass(frozen=True, slots=True)
class CompactionState:
    """Summary, cursors, mask boundary, pending flag, breaker and records of one conversation."""

    version: int = 0
    """Incremented by each save; the compare-and-set token."""
    mask_boundary: int = 0
    """Tool outputs (and images) of messages before this transcript index are masked (L1)."""
    image_boundary: int = 0
    """Images of messages before this transcript index are replaced by their reference (L1)."""
    masked: tuple[int, ...] = ()
    """Transcript indices of tool outputs masked one by one, wherever the mask boundary is (a
    layer's own choice, e.g. a file read that a later identical one supersedes); ascending."""
    drop_cursor: int = 0
    """Rounds starting before this transcript index are out of the view (L2 / L4)."""
    drop_reference: str = ""
    """Where the dropped messages were offloaded."""
    drop_digest: str = ""
    """The working-set digest shown with the dropped-rounds marker (`drop_digest_tokens`), made at a drop."""
    drop_digest_full: bool = False
    """The digest ran out of room for what it would have kept (layer 3 may then summarise)."""
    summary: Summary | None = None
    """The current summary (L3), if any."""
    minimal: bool = False
    """Emergency view: the pinned task, summary and marker are left out too (set by L4 only when needed)."""
    compression_required: bool = False
    """A compaction is due before the next model call (deferred, Agents-Flex)."""
    compression_reason: str = ""
    """Why it is due."""
    compression_required_at: float | None = None
    """Unix time it became due (persisted: the REQUIRED→COMPLETED latency spans restarts and instances)."""
    failures: int = 0
    """Consecutive summary failures."""
    breaker_open: bool = False
    """Summaries are no longer attempted for this conversation."""
    progress: tuple[ProgressStep, ...] = ()
    """Completed steps, in order."""
    progress_shown: int = 0
    """How many steps the system prompt shows (advanced only when the view changes anyway)."""
    records: tuple[CompactionRecord, ...] = ()
    """Every compaction so far."""

    @property
    def cut(self) -> int:
        """Transcript index from which rounds are in view (after drops and summary)."""
        return max(self.drop_cursor, self.summary.cursor if self.summary else 0)

    def evolve(self, **changes: Any) -> CompactionState:
        """A copy with `changes` (the version is bumped by the store on save)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form."""
        data = asdict(self)
        if not self.masked:  # unset, the document stays as versions without the field wrote (and read) it
            del data["masked"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompactionState:
        """Inverse of :meth:`to_dict`."""
        values = dict(data)
        summary = values.get("summary")
        values["summary"] = Summary(**summary) if summary else None
        values["masked"] = tuple(values.get("masked", ()))
        values["progress"] = tuple(ProgressStep(**p) for p in values.get("progress", ()))
        values["records"] = tuple(
            CompactionRecord(**{**r, "references": tuple(r.get("references", ()))})
            for r in values.get("records", ())
        )
        return cls(**values)
