"""What a replay measured, per model call and per trajectory.

Every figure is defined on the views a replay prepared (`View.neutral`, counted with
the replay's token counter) and the trajectory it replayed:

- **view tokens**: prompt tokens of the view sent at a call; **peak** is their maximum,
  **cumulative** their sum over the calls.
- **raw tokens**: prompt tokens of the same call with no compaction and an unlimited
  window (every transcript message before the call); **raw cumulative** their sum.
- **compactions**: per layer, how many times it changed the compaction state
  (`ReplayResult.compactions`).
- **calls over budget**: calls whose view exceeded `window - reserve`.
- **invariant violations**: views holding a tool call without its result or a result
  without its call.
- **FRR** (future-reference retention): see :class:`RetentionProbe`; `frr_in_view` counts a
  term anywhere in the view, `frr_whole` as a whole token, `frr_context` with the text that
  surrounded it earlier (a bare list of names does not pass it). :func:`pooled` and
  :func:`per_run_min` combine them over trajectories.
- **cacheable prefix**: see :class:`CacheModel` and :func:`shared_prefix_tokens`.
- **cost**: see :class:`Pricing`; output tokens are left out of both sides (a replay
  does not change the replies), so `cost_ratio` is the prompt-side cost ratio.
- **count error**: the raw count against the provider's recorded `prompt_tokens`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextkeep._messages import Message
from contextkeep._offload.workspace import Workspace
from contextkeep._tokens import TokenCounter
from contextkeep._view import View
from contextkeep.replay._pricing import (
    CACHE_RULES,
    CacheModel,
    Pricing,
    provider_cached,
    provider_prompt,
    shared_prefix_tokens,
)
from contextkeep.replay._retention import Retention, RetentionProbe, extract_terms, searchable
from contextkeep.replay.engine import CallResult, CallTotals, ReplayResult
from contextkeep.replay.trajectories import Trajectory

__all__ = [
    "CACHE_RULES",
    "CacheModel",
    "CallMetrics",
    "MetricsRecorder",
    "Pricing",
    "RetentionProbe",
    "TrajectoryMetrics",
    "extract_terms",
    "median",
    "per_run_min",
    "pooled",
    "searchable",
    "shared_prefix_tokens",
]


@dataclass(frozen=True, slots=True)
class CallMetrics(CallResult):
    """Everything measured at one call (the engine's figures, then these)."""

    shared_tokens: int
    """View tokens identical, from the start, to the previous view."""
    cached_tokens: int
    """`shared_tokens` at the cache's granularity (served from cache)."""
    prefix_break: bool
    """The previous view is not a prefix of this one."""
    raw_cached_tokens: int
    """Cached tokens of the raw prompt against the previous raw prompt."""
    cost: float
    """USD of the view, cache-aware."""
    raw_cost: float
    """USD of the raw prompt, cache-aware."""
    provider_tokens: int | None = None
    """The provider's recorded `prompt_tokens` for the original call."""
    provider_cached_tokens: int | None = None
    """The provider's recorded cache hits for the original call."""
    probes: tuple[RetentionProbe, ...] = ()
    """FRR probes of this call's reply."""

    @property
    def count_error_pct(self) -> float | None:
        """Signed error of `raw_tokens` in percent of the provider's `prompt_tokens`."""
        if not self.provider_tokens:
            return None
        return (self.raw_tokens - self.provider_tokens) / self.provider_tokens * 100


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


@dataclass(slots=True)
class TrajectoryMetrics(CallTotals):
    """Per-trajectory figures: sums, maxima and ratios over :class:`CallMetrics`."""

    name: str
    """The trajectory."""
    calls: list[CallMetrics] = field(default_factory=list)
    """Every call, in order."""
    compactions: dict[str, int] = field(default_factory=dict)
    """How many times each layer changed the compaction state."""
    recorded_cost: float | None = None
    """USD of the provider's recorded prompt usage (with its cache hits), when every call has it."""

    @property
    def cumulative_view_tokens(self) -> int:
        """Sum of the views' tokens."""
        return sum(c.view_tokens for c in self.calls)

    @property
    def cumulative_raw_tokens(self) -> int:
        """Sum of the raw prompts' tokens."""
        return sum(c.raw_tokens for c in self.calls)

    @property
    def probes(self) -> list[RetentionProbe]:
        """Every FRR probe."""
        return [p for c in self.calls for p in c.probes]

    @property
    def frr_in_view(self) -> float | None:
        """Probes in view / probes (`None` without probes: compaction never hid a reused term)."""
        probes = self.probes
        return _ratio(sum(p.in_view for p in probes), len(probes))

    @property
    def frr_whole(self) -> float | None:
        """Probes whose term is in view as a whole token / probes."""
        probes = self.probes
        return _ratio(sum(p.whole for p in probes), len(probes))

    @property
    def frr_context(self) -> float | None:
        """Probes whose term is in view with its earlier surroundings / probes."""
        probes = self.probes
        return _ratio(sum(p.in_context for p in probes), len(probes))

    @property
    def frr_recoverable(self) -> float | None:
        """Probes in view, or behind one reference to one output shown with its command / probes."""
        probes = self.probes
        return _ratio(sum(p.recoverable for p in probes), len(probes))

    @property
    def cacheable_prefix_fraction(self) -> float | None:
        """Cached view tokens / view tokens, summed over the calls (the first call has none)."""
        return _ratio(sum(c.cached_tokens for c in self.calls), self.cumulative_view_tokens)

    @property
    def prefix_breaks(self) -> int:
        """Calls whose view does not start with the whole previous view."""
        return sum(c.prefix_break for c in self.calls)

    @property
    def cost(self) -> float:
        """USD of every view."""
        return sum(c.cost for c in self.calls)

    @property
    def raw_cost(self) -> float:
        """USD of every raw prompt."""
        return sum(c.raw_cost for c in self.calls)

    @property
    def cost_ratio(self) -> float | None:
        """`cost / raw_cost`."""
        return _ratio(self.cost, self.raw_cost)

    @property
    def count_error_pct(self) -> float | None:
        """Median absolute count error over the calls with recorded usage."""
        errors = [abs(e) for c in self.calls if (e := c.count_error_pct) is not None]
        return statistics.median(errors) if errors else None

    def to_dict(self) -> dict[str, Any]:
        """The summary figures as JSON-ready values."""

        def r(x: float | None, digits: int = 4) -> float | None:
            return None if x is None else round(x, digits)

        return {
            "trajectory": self.name,
            "calls": len(self.calls),
            "peak_view_tokens": self.peak_view_tokens,
            "cumulative_view_tokens": self.cumulative_view_tokens,
            "cumulative_raw_tokens": self.cumulative_raw_tokens,
            "over_budget_calls": self.over_budget_calls,
            "invariant_violations": self.invariant_violations,
            "compactions": dict(self.compactions),
            "frr_probes": len(self.probes),
            "frr_in_view": r(self.frr_in_view),
            "frr_whole": r(self.frr_whole),
            "frr_context": r(self.frr_context),
            "frr_recoverable": r(self.frr_recoverable),
            "cacheable_prefix_fraction": r(self.cacheable_prefix_fraction),
            "prefix_breaks": self.prefix_breaks,
            "cost_usd": r(self.cost, 6),
            "raw_cost_usd": r(self.raw_cost, 6),
            "cost_ratio": r(self.cost_ratio),
            "recorded_cost_usd": r(self.recorded_cost, 6),
            "count_error_pct": r(self.count_error_pct, 3),
        }


_FRR = {
    "frr_in_view": "in_view",
    "frr_whole": "whole",
    "frr_context": "in_context",
    "frr_recoverable": "recoverable",
}


def pooled(runs: Sequence[TrajectoryMetrics], metric: str) -> float | None:
    """An FRR metric over every probe of `runs` together (`None` without probes).

    `metric` is `frr_in_view`, `frr_whole`, `frr_context` or `frr_recoverable`.
    """
    probes = [p for m in runs for p in m.probes]
    return _ratio(sum(getattr(p, _FRR[metric]) for p in probes), len(probes))


def per_run_min(runs: Sequence[TrajectoryMetrics], metric: str) -> float | None:
    """The smallest value of a per-trajectory metric over `runs` that have one."""
    values = [v for m in runs if (v := getattr(m, metric)) is not None]
    return min(values) if values else None


def median(runs: Sequence[TrajectoryMetrics], metric: str) -> float | None:
    """The median of a per-trajectory metric over `runs` that have one."""
    values = [v for m in runs if (v := getattr(m, metric)) is not None]
    return statistics.median(values) if values else None


@dataclass(slots=True)
class _Pending:
    shared: int
    cached: int
    broke: bool
    raw_cached: int
    probes: list[RetentionProbe]


class MetricsRecorder:
    """Collects per-call figures during a replay (pass `observe` as `on_view`), then `finish`es them."""

    def __init__(
        self,
        trajectory: Trajectory,
        counter_factory: Callable[[], TokenCounter],
        *,
        pricing: Pricing | None = None,
    ) -> None:
        self.trajectory = trajectory
        self.pricing = pricing or Pricing()
        self.cache = self.pricing.cache_rule  # the prices and the cache rule come together
        self._view_counter = counter_factory()
        self._raw_counter = counter_factory()
        self._retention = Retention(trajectory.messages)
        self._previous: list[Message] = []
        self._previous_raw: list[Message] = []
        self._pending: list[_Pending] = []

    def observe(self, index: int, view: View) -> None:
        """Measure the view prepared for the call that produced transcript message `index`."""
        tools = self.trajectory.tools
        shared, broke = shared_prefix_tokens(self._view_counter, self._previous, view.neutral, tools)
        raw = self.trajectory.messages[:index]
        raw_shared, _ = shared_prefix_tokens(self._raw_counter, self._previous_raw, raw, tools)
        # What the next call can find cached: this prompt, and with some providers its reply too.
        reply = self.trajectory.messages[index : index + 1] if self.cache.replies else []
        self._previous, self._previous_raw = [*view.neutral, *reply], [*raw, *reply]
        probes = self._retention.probes(len(self._pending), index, view.neutral)
        self._pending.append(
            _Pending(shared, self.cache.cacheable(shared), broke, self.cache.cacheable(raw_shared), probes)
        )

    async def finish(self, result: ReplayResult, workspace: Workspace) -> TrajectoryMetrics:
        """Combine the replay's results with the recorded figures; read references for FRR."""
        texts: dict[str, str] = {}
        metrics = TrajectoryMetrics(result.name, compactions=result.compactions)
        for call, pending, recorded in zip(result.calls, self._pending, self.trajectory.calls, strict=True):
            probes = [await self._retention.resolve(p, workspace, texts) for p in pending.probes]
            usage = recorded.usage or {}
            metrics.calls.append(
                CallMetrics(
                    call.index,
                    call.view_tokens,
                    call.raw_tokens,
                    call.layers,
                    call.over_budget,
                    call.violations,
                    pending.shared,
                    pending.cached,
                    pending.broke,
                    pending.raw_cached,
                    self.pricing.cost(call.view_tokens, pending.cached),
                    self.pricing.cost(call.raw_tokens, pending.raw_cached),
                    provider_prompt(usage),
                    provider_cached(usage),
                    tuple(probes),
                )
            )
        if metrics.calls and all(c.provider_tokens for c in metrics.calls):
            metrics.recorded_cost = sum(
                self.pricing.cost(c.provider_tokens or 0, c.provider_cached_tokens or 0)
                for c in metrics.calls
            )
        return metrics
