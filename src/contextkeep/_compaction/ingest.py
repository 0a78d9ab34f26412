"""Layer 0: tool-result truncation (AgentScope), applied to every view of an over-long result.

The transcript keeps the full result (principle 1); its full text is offloaded
when it is added, so the truncated form can name the file.
"""

from __future__ import annotations

from contextkeep._compaction.render import truncation_reminder
from contextkeep._tokens import TokenCounter

__all__ = ["truncate_tool_result"]


def truncate_tool_result(text: str, limit: int, counter: TokenCounter, reference: str | None) -> str | None:
    """Head and tail of `text` within `limit` tokens, then the marker; `None` if it fits already.

    Also `None` when the marker would not pay for itself: a result just over the limit stays
    whole rather than come back longer than it was.
    """
    if len(text.encode()) <= limit:  # a token is at least one byte: no need to count
        return None
    tokens = counter.count_text(text)
    if tokens <= limit:
        return None
    reminder = truncation_reminder(reference)
    # The kept part fits the limit; the marker and reminder come on top (AgentScope).
    budget = limit
    chars = int(len(text) * budget / tokens)
    # Shrink until the kept text fits; the character estimate is usually right the first time.
    while True:
        head = chars - chars // 3
        tail = chars // 3
        kept = f"{text[:head]}\n...\n{text[len(text) - tail :] if tail else ''}"
        if counter.count_text(kept) <= budget or chars <= 16:
            truncated = f"{kept}\n{reminder}"
            return truncated if counter.count_text(truncated) < tokens else None
        chars = int(chars * 0.85)
