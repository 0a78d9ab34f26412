"""The exact texts compaction puts into a view (layer markers, previews, references)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from contextkeep.compaction.state import ProgressStep

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


def masked_output(text: str, max_chars: int, reference: str, terms: Sequence[str] = ()) -> str:
    """Layer 1: an old tool output as a short preview, the names it mentions, and its reference."""
    preview = head_tail(text, max_chars)
    mentions = fit_terms(terms, exclude=preview, max_chars=max_chars)
    listed = f"\n[mentions: {mentions}]" if mentions else ""
    return f"{preview}{listed}\n{detail_reference(reference)}"


_TERMS = (
    re.compile(r"\b[A-Z]\w*(?:Error|Exception|Warning)\b"),  # exception names first: agents come back to them
    re.compile(r"(?<![\w/.])(?:[\w.-]+/)+[\w.-]+\.\w{1,5}(?::\d+)?\b"),  # paths, with a line number if any
    re.compile(r"\b[a-z]\w*_\w+\b|\b[A-Z][a-z]+[A-Z]\w*\b"),  # snake_case and CamelCase identifiers
)
MAX_TERMS = 40
"""Terms kept per message (in order of kind, then of first appearance)."""


def find_terms(text: str) -> list[str]:
    """Distinct error names, paths and identifiers of `text`: what an agent is likely to need again."""
    seen: dict[str, None] = {}
    for pattern in _TERMS:
        for term in pattern.findall(text):
            seen.setdefault(term)
            if len(seen) >= MAX_TERMS:
                return list(seen)
    return list(seen)


def fit_terms(terms: Sequence[str], *, exclude: str = "", max_chars: int = 200) -> str:
    """Terms not already in `exclude`, comma-separated within `max_chars`."""
    out: list[str] = []
    size = 0
    for term in dict.fromkeys(terms):
        if term in exclude:
            continue
        if size + len(term) + 2 > max_chars:
            break
        out.append(term)
        size += len(term) + 2
    return ", ".join(out)


def truncation_reminder(reference: str | None) -> str:
    """Layer 0: what follows the marker (AgentScope's wording)."""
    base = "The remaining content has been omitted for limited context."
    if reference:
        base += f" You can refer to the file in '{reference}' for the truncated content if needed."
    return f"{TRUNCATION_MARKER}\n<system-reminder>{base}</system-reminder>"


def dropped_marker(rounds: int, first_id: str, last_id: str, reference: str, mentions: str = "") -> str:
    """Layer 2: the one line that stays where whole rounds were dropped (with the names they mention)."""
    named = f" They mention: {mentions}." if mentions else ""
    return (
        f"[contextkeep: {rounds} earlier round(s), messages {first_id} to {last_id}, were removed from this "
        f"view to save context.{named} {detail_reference(reference)}]"
    )


def progress_section(steps: Sequence[ProgressStep]) -> str:
    """Task progress appended to the system prompt: completed steps and their snapshots."""
    lines = ["", "## Task progress (completed steps)"]
    for s in steps:
        ref = f" {detail_reference(s.reference)}" if s.reference else ""
        lines.append(f"- step {s.step} {s.action}: {s.summary}{ref}")
    return "\n".join(lines)
