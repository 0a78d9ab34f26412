"""The summariser protocol used by layer 3."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from contextkeep._config import ContextConfig
from contextkeep._messages import Message
from contextkeep._tokens import TokenCounter

__all__ = ["DEFAULT_SUMMARY_FIELDS", "Summarizer", "Summary", "SummaryRequest", "SummaryResult"]

DEFAULT_SUMMARY_FIELDS = (
    "task_overview",
    "current_state",
    "important_discoveries",
    "next_steps",
    "context_to_preserve",
)
"""AgentScope's five summary fields, the default structure."""


@dataclass(frozen=True, slots=True)
class Summary:
    """A summary of the transcript before `cursor` (the compaction state holds the current one)."""

    text: str
    """Rendered summary text (what goes into the summary slot)."""
    cursor: int
    """Transcript messages before this index are covered."""
    data: Mapping[str, Any] | None = None
    """The structured fields, when the summariser produced them."""
    method: str = "extractive"
    """`llm` or `extractive`."""
    reference: str = ""
    """Where every message the summary replaced can be read in full."""


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What a summariser is asked to fold into the summary."""

    conversation_id: str
    """The conversation."""
    messages: Sequence[Message]
    """Transcript messages newly covered since the previous summary (full text, not the view's)."""
    previous: Summary | None
    """The summary so far, to be updated incrementally; `None` for the first."""
    config: ContextConfig
    """Prompt, template, schema and `max_summary_tokens`."""
    counter: TokenCounter
    """Counts tokens to keep the summary within its bound."""
    digest: Sequence[str] = ()
    """Lines of the working-set digest that stood for the dropped rounds the summary now replaces
    (verbatim: the agent's commands with their outputs' references, lines it used); keep them."""


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """A new summary covering the previous one plus the request's messages."""

    text: str
    """Rendered text placed into the summary slot (through `summary_template`)."""
    data: Mapping[str, Any] | None = None
    """The structured fields, when there are any."""
    method: str = "extractive"
    """`llm` or `extractive`."""
    wait_seconds: float = 0.0
    """Time spent waiting for a model (0 for a summariser that calls none); the rest of the
    summary's time is the summariser's own work (`summary_cpu_ms` of the compaction)."""


@runtime_checkable
class Summarizer(Protocol):
    """Produces the layer-3 summary. Raises `SummaryError` on failure (an empty or invalid result is one)."""

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Fold `request.messages` into `request.previous`."""
        ...
