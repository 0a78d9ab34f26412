"""The exact texts compaction puts into a view (layer markers, previews, references)."""

from __future__ import annotations

from collections.abc import Sequence

from contextkeep._compaction.state import ProgressStep

__all__ = [
    "TRUNCATION_MARKER",
    "detail_reference",
    "dropped_marker",
    "head_tail",
    "masked_output",
    "progress_section",
    "truncation_reminder",
]

TRUNCATION_MARKER = "<<<TRUNCATED>>>"


def detail_reference(reference: str) -> str:
    """DB-GPT's reference line."""
    return f"[Full detail available at: {reference}]"


def head_tail(text: str, max_chars: int) -> str:
    """At most `max_chars` characters: the head and the tail, so trailing errors survive."""
    if len(text) <= max_chars:
        return text
    gap = " … "
    keep = max(max_chars - len(gap), 2)
    head = keep - keep // 2
    return text[:head] + gap + text[len(text) - keep // 2 :]


def masked_output(text: str, max_chars: int, reference: str, used: Sequence[str] = ()) -> str:
    """Layer 1: an old tool output as a short preview (and the lines `used`) plus its reference."""
    kept = "".join(f"\n{line}" for line in used)
    return f"{head_tail(text, max_chars)}{kept}\n{detail_reference(reference)}"


def truncation_reminder(reference: str | None) -> str:
    """Layer 0: what follows the marker (AgentScope's wording)."""
    base = "The remaining content has been omitted for limited context."
    if reference:
        base += f" You can refer to the file in '{reference}' for the truncated content if needed."
    return f"{TRUNCATION_MARKER}\n<system-reminder>{base}</system-reminder>"


def dropped_marker(rounds: int, first_id: str, last_id: str, reference: str) -> str:
    """Layer 2: the one line that stays where whole rounds were dropped."""
    return (
        f"[contextkeep: {rounds} earlier round(s), messages {first_id} to {last_id}, were removed from this "
        f"view to save context. {detail_reference(reference)}]"
    )


def progress_section(steps: Sequence[ProgressStep]) -> str:
    """Task progress appended to the system prompt: completed steps and their snapshots."""
    lines = ["", "## Task progress (completed steps)"]
    for s in steps:
        ref = f" {detail_reference(s.reference)}" if s.reference else ""
        lines.append(f"- step {s.step} {s.action}: {s.summary}{ref}")
    return "\n".join(lines)
