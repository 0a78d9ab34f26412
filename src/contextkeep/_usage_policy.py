"""Agents-Flex's usage policy: provider-confirmed usage decides when to compact, before the next call.

The state machine, one reply at a time::

    reply's usage ──observe──▶ UsageState (baseline: confirmed, invalidated or none)
                  ──due──────▶ CompactionDue (baseline ratio ≥ compression_threshold_ratio)
                                 └─ sets `compression_required` on the compaction state
    compaction that changed the view ──compacted──▶ baseline invalidated

The policy only decides. It never writes: each decision is a value (the new usage state, the
change to make to the compaction state, the events to emit) that the session persists and
reports, so usage and compaction state meet in one visible place. The baseline rules
themselves are in :mod:`contextkeep.baseline`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from contextkeep._baseline import UsageState, figures, observe_usage
from contextkeep._budget import Budget
from contextkeep._capabilities import ModelSpec
from contextkeep._compaction import CompressionReason
from contextkeep._compaction.state import CompactionState
from contextkeep._config import ContextConfig, UsageMode
from contextkeep._events import CompressionRequired, ContextStatus, ModelCompleted
from contextkeep._tokens import CountSource
from contextkeep._usage import Usage

__all__ = ["CompactionDue", "UsagePolicy"]


@dataclass(frozen=True, slots=True)
class CompactionDue:
    """The policy's decision that the next call must be compacted first."""

    at: float
    """Unix time of the decision (persisted with the flag: the latency to its compaction spans restarts)."""
    threshold_ratio: float
    """The threshold the baseline reached."""

    def apply(self, state: CompactionState) -> CompactionState:
        """`state` with the deferred `compression_required` flag set."""
        return state.evolve(
            compression_required=True,
            compression_reason=CompressionReason.THRESHOLD_REACHED,
            compression_required_at=self.at,
        )

    def event(self, usage: UsageState) -> CompressionRequired:
        """The `context.compression.required` event, for the baseline that reached the threshold."""
        return CompressionRequired(
            next_call_baseline_tokens=usage.baseline, threshold_ratio=self.threshold_ratio, timestamp=self.at
        )


class UsagePolicy:
    """The usage policy of one model under one configuration (pure: it holds no state of its own)."""

    def __init__(self, config: ContextConfig, model: ModelSpec) -> None:
        self.config = config
        """`usage_mode` and `compression_threshold_ratio` decide."""
        self.model = model
        """The model whose replies are observed."""

    def observe(self, state: UsageState, usage: Usage) -> UsageState:
        """The usage state after a reply that reported `usage` (complete, partial or none)."""
        return observe_usage(state, usage, self.model.key)

    def due(self, state: UsageState, budget: Budget, compaction: CompactionState) -> CompactionDue | None:
        """Whether the confirmed baseline asks to compact before the next call (None: no, or already due)."""
        numbers = figures(state, budget.context_window, budget.reserved_output)
        threshold = self.config.compression_threshold_ratio
        required = (
            self.config.usage_mode is not UsageMode.LOCAL_ONLY
            and numbers.ratio is not None
            and numbers.ratio >= threshold
        )
        if not required or compaction.compression_required:
            return None
        return CompactionDue(time.time(), threshold)

    @staticmethod
    def compacted(state: UsageState) -> UsageState:
        """The usage state after a compaction changed the view: the baseline no longer describes it."""
        return state.invalidated()

    def completed(
        self, usage: Usage, state: UsageState, budget: Budget, compression_required: bool
    ) -> ModelCompleted:
        """The `model.completed` event of a reply, with the baseline it left."""
        numbers = figures(state, budget.context_window, budget.reserved_output)
        return ModelCompleted(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
            usage_source=usage.source.value,
            model_key=self.model.key,
            context_window_tokens=budget.context_window,
            model_max_output_tokens=self.model.max_output_tokens,
            reserved_output_tokens=budget.reserved_output,
            next_call_baseline_tokens=state.baseline if state.valid else None,
            baseline_ratio=numbers.ratio,
            remaining_baseline_tokens=numbers.remaining,
            compression_required=compression_required,
            usage_baseline_valid=state.valid,
            usage_status=state.status.value,
        )

    def confirmed_status(self, state: UsageState, budget: Budget, conversation_id: str) -> ContextStatus:
        """Confirmed-only mode's status: the provider's baseline, never a local figure."""
        numbers = figures(state, budget.context_window, budget.reserved_output)
        used = state.baseline if state.valid and state.baseline is not None else 0
        return ContextStatus(
            used=used,
            budget=numbers.usable_input if numbers.ratio is not None else None,
            ratio=numbers.ratio,
            state=budget.thresholds.state(numbers.ratio) if numbers.ratio is not None else None,
            remaining=numbers.remaining,
            source=CountSource.PROVIDER_CONFIRMED,
            conversation_id=conversation_id,
            context_window=budget.context_window,
            reserved_output=budget.reserved_output,
            model_key=self.model.key,
            capacity_source=budget.capacity_source.value,
        )
