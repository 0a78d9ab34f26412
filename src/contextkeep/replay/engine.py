"""Replaying a recorded conversation call by call through a context manager."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from contextkeep._errors import MalformedHistoryError
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._rounds import split_rounds
from contextkeep._usage import Usage
from contextkeep._view import View
from contextkeep.replay.trajectories import Trajectory

__all__ = ["CallResult", "CallTotals", "ReplayResult", "references_in", "replay"]

_REFERENCE = re.compile(r"\[Full detail available at: ([^\]\s]+)\]|refer to the file in '([^']+)'")


def references_in(messages: list[Message]) -> list[str]:
    """Every offload reference a view shows."""
    return [a or b for m in messages for a, b in _REFERENCE.findall(m.text)]


@dataclass(frozen=True, slots=True)
class CallResult:
    """One replayed model call."""

    index: int
    """Transcript index of the assistant message the call produced."""
    view_tokens: int
    """Tokens of the prepared view."""
    raw_tokens: int
    """Tokens the same prompt would have without compaction."""
    layers: tuple[str, ...]
    """Layers that ran before the call."""
    over_budget: bool
    """Whether the view exceeded the effective budget."""
    violations: int
    """Pairing violations in the view (0 or 1)."""


class CallTotals:
    """Figures over `self.calls` shared by replay results and their metrics."""

    calls: Sequence[CallResult]

    @property
    def peak_view_tokens(self) -> int:
        """Largest view."""
        return max((c.view_tokens for c in self.calls), default=0)

    @property
    def over_budget_calls(self) -> int:
        """Calls whose view exceeded the budget."""
        return sum(c.over_budget for c in self.calls)

    @property
    def invariant_violations(self) -> int:
        """Views with a call without result or a result without call."""
        return sum(c.violations for c in self.calls)


@dataclass(slots=True)
class ReplayResult(CallTotals):
    """A whole replay."""

    name: str
    """The trajectory."""
    calls: list[CallResult] = field(default_factory=list)
    """Every call, in order."""
    references: set[str] = field(default_factory=set)
    """Every reference any view showed."""

    @property
    def compactions(self) -> dict[str, int]:
        """How many times each layer ran."""
        return dict(Counter(layer for c in self.calls for layer in c.layers))


async def replay(
    trajectory: Trajectory,
    manager: ContextManager,
    *,
    conversation_id: str | None = None,
    on_view: Callable[[int, View], None] | None = None,
    provider_usage: bool = False,
) -> ReplayResult:
    """Feed the trajectory's messages call by call; prepare a view before each recorded call.

    With `provider_usage`, each reply is recorded with usage like a provider's: the
    recorded usage while the view is still the raw prompt, and after the first
    compaction a simulated provider's (the view's own count as prompt tokens, the
    recorded completion tokens).
    """
    result = ReplayResult(trajectory.name)
    raw = manager.new_counter()
    async with manager.session(conversation_id or _safe(trajectory.name)) as session:
        added = 0
        for call in trajectory.calls:
            await session.add(trajectory.messages[added : call.index])
            added = call.index
            view = await session.prepare(tools=trajectory.tools)
            effective = session.budget().effective
            try:
                split_rounds(view.neutral)
                violations = 0
            except MalformedHistoryError:
                violations = 1
            raw_tokens = raw.count_prompt(trajectory.messages[: call.index], trajectory.tools)
            over = effective is not None and view.tokens > effective
            result.calls.append(
                CallResult(call.index, view.tokens, raw_tokens, view.compacted, over, violations)
            )
            result.references.update(references_in(view.neutral))
            if on_view is not None:
                on_view(call.index, view)
            reply = trajectory.messages[call.index]
            if provider_usage:
                recorded = Usage.from_openai(call.usage)
                compacted = any(c.layers for c in result.calls)
                usage = (
                    Usage(input_tokens=view.tokens, output_tokens=recorded.output_tokens)
                    if compacted
                    else recorded
                )
                await session.record(reply, usage)
            else:
                await session.add([reply])
            added = call.index + 1
    return result


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)
