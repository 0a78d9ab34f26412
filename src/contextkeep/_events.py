"""Typed events and the bus that delivers them.

Every count, decision, compaction, failure and recovery is an event. Each event
is a frozen dataclass with a `type` string from the catalogue below and a
`to_dict()` for JSON (server-sent events, logs, metrics).

The bus that delivers them is in `_event_bus` (re-exported here).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from contextkeep._budget import Budget, ContextState
from contextkeep._event_bus import EventBus, Listener
from contextkeep._event_names import agents_flex_fields
from contextkeep._tokens.counter import CountSource

__all__ = [
    "CapacityCorrected",
    "CompressionCompleted",
    "CompressionFailed",
    "CompressionRequired",
    "CompressionStarted",
    "ContextOffloaded",
    "ContextStatus",
    "Event",
    "EventBus",
    "HistoryRepaired",
    "Listener",
    "ModelCompleted",
    "RecoveryFailed",
    "RecoveryStarted",
    "RecoverySucceeded",
    "ReserveClamped",
    "StoreConflict",
    "StoreSaveFailed",
    "ToolResultTruncated",
]


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base of every event."""

    type: ClassVar[str] = "event"
    conversation_id: str = ""
    """The conversation it concerns (empty for a run without one)."""
    timestamp: float = field(default_factory=time.time)
    """Unix time it was emitted."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields, `type` first."""
        out: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.value if hasattr(value, "value") else value
        return out

    def to_agents_flex(self) -> dict[str, Any]:
        """This event as Agents-Flex delivers it: its type name there and camelCase `data` keys."""
        return agents_flex_fields(self.to_dict())


@dataclass(frozen=True, kw_only=True)
class ContextStatus(Event):
    """How full the window is: after every count and after every compaction layer."""

    type: ClassVar[str] = "context.status"
    used: int
    """Prompt tokens of the view."""
    budget: int | None
    """Effective budget (`context_window - reserved_output`); `None` when capacity is unknown."""
    ratio: float | None
    """`used / budget`; `None` when the budget is unknown."""
    state: ContextState | None
    """normal, warning, error, critical or overflow; `None` when the budget is unknown."""
    remaining: int | None
    """`budget - used`; `None` when the budget is unknown."""
    compact_layer: str | None = None
    """The layer that just ran (`L0`...`L4`), or `None` for a plain count."""
    source: CountSource = CountSource.ESTIMATE
    """Where `used` came from: local tokenizer, estimate or provider-confirmed."""
    context_window: int | None = None
    """The model's total window."""
    reserved_output: int = 0
    """Tokens reserved for the reply."""
    capacity_source: str = "unknown"
    """Which figure bound the window: the model's (explicit, endpoint, registry), config, or unknown."""
    model_key: str = ""
    """The model the view is for."""

    @classmethod
    def measure(
        cls, used: int, budget: Budget, *, source: CountSource, layer: str | None = None, **context: Any
    ) -> ContextStatus:
        """A status for `used` tokens against `budget` (`capacity_source` is the budget's unless given)."""
        context = {"capacity_source": budget.capacity_source.value, **context}
        return cls(
            used=used,
            budget=budget.effective,
            ratio=budget.ratio(used),
            state=budget.state(used),
            remaining=budget.remaining(used),
            compact_layer=layer,
            source=source,
            context_window=budget.context_window,
            reserved_output=budget.reserved_output,
            **context,
        )


@dataclass(frozen=True, kw_only=True)
class ModelCompleted(Event):
    """A model call finished; carries the provider's usage and the baseline it sets."""

    type: ClassVar[str] = "model.completed"
    input_tokens: int | None = None
    """Prompt tokens the provider reported."""
    output_tokens: int | None = None
    """Completion tokens the provider reported."""
    total_tokens: int | None = None
    """Total tokens the provider reported."""
    usage_source: str = "UNAVAILABLE"
    """`PROVIDER_CONFIRMED` or `UNAVAILABLE`."""
    model_key: str = ""
    """The model that answered."""
    context_window_tokens: int | None = None
    """The configured total window."""
    model_max_output_tokens: int | None = None
    """The model's maximum output."""
    reserved_output_tokens: int = 0
    """The output reservation used for the figures."""
    next_call_baseline_tokens: int | None = None
    """Confirmed baseline for the next call (prompt + completion of this one)."""
    baseline_ratio: float | None = None
    """Baseline / usable input; only while the baseline is valid and capacity known."""
    remaining_baseline_tokens: int | None = None
    """Usable input - baseline; only while the baseline is valid and capacity known."""
    compression_required: bool = False
    """Whether the view will be compacted before the next real model call."""
    usage_baseline_valid: bool = False
    """Whether ratio and remaining may be shown."""
    usage_status: str = "NO_CONFIRMED_USAGE"
    """NO_CONFIRMED_USAGE, CONFIRMED_BASELINE or BASELINE_INVALIDATED."""


@dataclass(frozen=True, kw_only=True)
class CompressionRequired(Event):
    """Compaction is scheduled before the next real model call (not done yet)."""

    type: ClassVar[str] = "context.compression.required"
    reason: str = "THRESHOLD_REACHED"
    """Why: `THRESHOLD_REACHED`."""
    next_call_baseline_tokens: int | None = None
    """The confirmed baseline that reached the threshold."""
    threshold_ratio: float | None = None
    """The configured threshold."""
    compression_before_next_call: bool = True
    """Always true: compaction happens before the next call."""


@dataclass(frozen=True, kw_only=True)
class _CompressionEvent(Event):
    layer: str | None = None
    """The layer (`L1`...`L4`) or `pipeline`."""
    compression_reason: str = ""
    """THRESHOLD_REACHED, BUDGET (local decision), OVERFLOW_RECOVERY or MANUAL."""
    usage_status: str = "NO_CONFIRMED_USAGE"
    """The usage baseline state after the event."""
    compression_required: bool = False
    """Whether a compression is still pending."""
    usage_baseline_valid: bool = False
    """Whether the usage baseline is still valid."""


@dataclass(frozen=True, kw_only=True)
class CompressionStarted(_CompressionEvent):
    """Compaction started."""

    type: ClassVar[str] = "context.compression.started"
    tokens_before: int = 0
    """View tokens before."""


@dataclass(frozen=True, kw_only=True)
class CompressionCompleted(_CompressionEvent):
    """Compaction finished."""

    type: ClassVar[str] = "context.compression.completed"
    tokens_before: int = 0
    """View tokens before."""
    tokens_after: int = 0
    """View tokens after."""
    references: tuple[str, ...] = ()
    """Offload references of what left the view."""
    layers_ms: float = 0.0
    """Time the layers took to decide and rebuild the view (counting included), without waiting
    for the summariser or for I/O."""
    summary_ms: float = 0.0
    """Time the summariser took: `summary_wait_ms + summary_cpu_ms`."""
    summary_wait_ms: float = 0.0
    """The part of `summary_ms` spent waiting: for the summarising model (or for the CPU)."""
    summary_cpu_ms: float = 0.0
    """The summariser's own CPU time (building the prompt, chunking, parsing, fitting the summary)."""
    offload_ms: float = 0.0
    """Time spent writing what left the view to the workspace (durably, before the state is saved)."""
    into_current_turn: bool = False
    """L4 cut into the current turn (down to the system prompt and the last two rounds)."""
    required_at: float | None = None
    """Unix time of the `context.compression.required` this compaction consumed (persisted with the
    flag, so it holds across restarts and instances); `None` when none was pending."""


@dataclass(frozen=True, kw_only=True)
class CompressionFailed(_CompressionEvent):
    """Compaction (or a summary) failed."""

    type: ClassVar[str] = "context.compression.failed"
    error: str = ""
    """What went wrong."""
    reason: str = "summary_failed"
    """`summary_failed`, `breaker_open` (the summariser was not called) or `nothing_to_compress`."""
    consecutive_failures: int = 0
    """Failures in a row for this conversation."""
    breaker_open: bool = False
    """Whether the circuit breaker now stops further attempts."""


@dataclass(frozen=True, kw_only=True)
class ToolResultTruncated(Event):
    """A tool result over the limit was cut at ingest (layer 0)."""

    type: ClassVar[str] = "tool_result.truncated"
    tool_call_id: str = ""
    """The call whose result was cut."""
    tokens_before: int = 0
    """Tokens of the full result."""
    tokens_after: int = 0
    """Tokens kept in the transcript's view."""
    reference: str = ""
    """Where the full result was offloaded."""


@dataclass(frozen=True, kw_only=True)
class ContextOffloaded(Event):
    """Content left the view and was written to the workspace."""

    type: ClassVar[str] = "context.offloaded"
    reference: str = ""
    """Where it went."""
    kind: str = ""
    """tool_result, context (dropped or summarised messages), snapshot or data."""
    messages: int = 0
    """How many messages it holds."""


@dataclass(frozen=True, kw_only=True)
class HistoryRepaired(Event):
    """A configured repair policy changed a malformed history."""

    type: ClassVar[str] = "history.repaired"
    kind: str = ""
    """orphan_result, duplicate_id or missing_result."""
    message_id: str = ""
    """The offending message or call."""
    action: str = ""
    """dropped or synthesized."""


@dataclass(frozen=True, kw_only=True)
class _RecoveryEvent(Event):
    attempt: int = 0
    """Which recovery attempt (1-based)."""
    phase: str = ""
    """The overflow phase (INPUT_CONTEXT, TOTAL_CONTEXT, ...)."""
    limit: int | None = None
    """The provider's limit, when reported."""
    requested: int | None = None
    """What the request needed, when reported."""


@dataclass(frozen=True, kw_only=True)
class RecoveryStarted(_RecoveryEvent):
    """A provider overflow is being recovered by compacting and retrying."""

    type: ClassVar[str] = "model.recovery.started"


@dataclass(frozen=True, kw_only=True)
class RecoverySucceeded(_RecoveryEvent):
    """The retried call succeeded."""

    type: ClassVar[str] = "model.recovery.succeeded"
    tokens_before: int = 0
    """View tokens before the recovery compaction."""
    tokens_after: int = 0
    """View tokens of the retried call."""


@dataclass(frozen=True, kw_only=True)
class RecoveryFailed(_RecoveryEvent):
    """Recovery gave up; the original error goes on to the caller."""

    type: ClassVar[str] = "model.recovery.failed"
    reason: str = ""
    """not_recoverable, nothing_to_compact, compaction_failed, attempts_exhausted or max_calls_reached
    (no model call left for the retry: the runner's `max_iterations`)."""


@dataclass(frozen=True, kw_only=True)
class CapacityCorrected(Event):
    """A provider's overflow error stated a smaller window: the conversation budgets for it from now on."""

    type: ClassVar[str] = "context.capacity.corrected"
    model_key: str = ""
    """The model the window is for."""
    context_window: int = 0
    """The window the provider stated."""
    previous_window: int | None = None
    """The window budgeted for until then (`None`: unknown)."""
    previous_source: str = "unknown"
    """Where that figure came from (explicit, upstream, endpoint, registry, config)."""
    capacity_source: str = "provider_error"
    """The new figure's source."""


@dataclass(frozen=True, kw_only=True)
class ReserveClamped(Event):
    """The reservation left the prompt no room in the window: a smaller one is budgeted instead."""

    type: ClassVar[str] = "context.reserve.clamped"
    model_key: str = ""
    """The model the view is for."""
    context_window: int = 0
    """The window budgeted for."""
    requested: int = 0
    """The reservation asked for, at least the window: the request's `max_tokens`, or a configured
    one above a window learned since (a provider's overflow error)."""
    reserved_output: int = 0
    """What is reserved instead (the configured reservation, else a quarter of the window)."""

    @classmethod
    def of(cls, budget: Budget, model_key: str) -> ReserveClamped:
        """The event for a budget whose reservation was lowered."""
        return cls(
            model_key=model_key,
            context_window=budget.context_window or 0,
            requested=budget.clamped_from or 0,
            reserved_output=budget.reserved_output,
        )


@dataclass(frozen=True, kw_only=True)
class StoreConflict(Event):
    """A compare-and-set write lost to another instance; the engine reloaded and retried."""

    type: ClassVar[str] = "store.conflict"
    kind: str = ""
    """What was being written: transcript, compaction or usage."""


@dataclass(frozen=True, kw_only=True)
class StoreSaveFailed(Event):
    """A store write raised (the store failed; a lost compare-and-set is a `StoreConflict`)."""

    type: ClassVar[str] = "store.save_failed"
    store: str = ""
    """The backend: sqlite, postgresql, mysql, redis, memory, or a custom store's class name."""
    kind: str = ""
    """What was being written: transcript, compaction or usage."""
    error: str = ""
    """The store's error message."""
