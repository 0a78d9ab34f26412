"""Metrics through the OpenTelemetry API: a no-op unless the application configures a meter provider.

What the usage policy's monitoring list asks for, fed from the event bus:
share of calls with usage unavailable (`contextkeep.model.calls` by `usage_source`),
baseline ratio distribution, threshold-reached count, compression outcomes by
reason (threshold vs overflow recovery vs budget) and duration, the latency from
`context.compression.required` to the compaction that consumed it, recovery
attempts and outcomes, and store compare-and-set conflicts and save failures.

The REQUIRED→COMPLETED latency is measured from the time persisted with the flag,
so it is recorded by whichever process compacts, after a restart or on another
instance too (those clocks must agree; a negative span is recorded as 0).
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import metrics

from contextkeep._events import Event, EventBus

__all__ = ["install_metrics"]


class _Recorder:
    def __init__(self, meter: metrics.Meter) -> None:
        self.calls = meter.create_counter(
            "contextkeep.model.calls", description="Model calls by usage source"
        )
        self.ratio = meter.create_histogram(
            "contextkeep.usage.baseline_ratio", description="Confirmed baseline ratio"
        )
        self.threshold = meter.create_counter(
            "contextkeep.compression.threshold_reached", description="Deferred compressions scheduled"
        )
        self.compressions = meter.create_counter(
            "contextkeep.compression.outcomes", description="Compactions by outcome and reason"
        )
        self.duration = meter.create_histogram(
            "contextkeep.compression.duration", unit="ms", description="Compaction duration"
        )
        self.recovery = meter.create_counter(
            "contextkeep.recovery", description="Overflow recovery by outcome"
        )
        self.conflicts = meter.create_counter("contextkeep.store.cas_conflicts", description="CAS conflicts")
        self.save_failures = meter.create_counter(
            "contextkeep.store.save_failures", description="Store saves that raised, by store and kind"
        )
        self.required_latency = meter.create_histogram(
            "contextkeep.compression.required_latency",
            unit="ms",
            description="From a deferred compression being required to the compaction that consumed it",
        )
        self._started: dict[str, float] = {}

    def __call__(self, event: Event) -> None:
        data = _Fields(event)  # read as needed: `to_dict` on every model call costs ~10 µs
        kind = event.type
        if kind == "model.completed":
            self.calls.add(1, {"usage_source": data["usage_source"]})
            if data["baseline_ratio"] is not None:
                self.ratio.record(data["baseline_ratio"])
        elif kind == "context.compression.required":
            self.threshold.add(1)
        elif kind == "context.compression.started":
            self._started[event.conversation_id] = time.perf_counter()
        elif kind in ("context.compression.completed", "context.compression.failed"):
            outcome = kind.rsplit(".", 1)[1]
            self.compressions.add(1, {"outcome": outcome, "reason": data["compression_reason"]})
            started = self._started.pop(event.conversation_id, None)
            if started is not None and outcome == "completed":
                self.duration.record(
                    (time.perf_counter() - started) * 1000, {"reason": data["compression_reason"]}
                )
            if data.get("required_at") is not None:
                waited = max(event.timestamp - data["required_at"], 0.0) * 1000
                self.required_latency.record(waited, {"reason": data["compression_reason"]})
        elif kind.startswith("model.recovery."):
            self.recovery.add(1, {"outcome": kind.rsplit(".", 1)[1], "reason": data.get("reason", "")})
        elif kind == "store.conflict":
            self.conflicts.add(1, {"kind": data["kind"]})
        elif kind == "store.save_failed":
            self.save_failures.add(1, {"store": data["store"], "kind": data["kind"]})


class _Fields:
    """An event's fields by name, as `Event.to_dict` gives them (enums by value)."""

    def __init__(self, event: Event) -> None:
        self._event = event

    def __getitem__(self, name: str) -> Any:
        value = getattr(self._event, name)
        return value.value if hasattr(value, "value") else value

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if hasattr(self._event, name) else default


_RECORDED = (
    "model.completed",
    "context.compression.required",
    "context.compression.started",
    "context.compression.completed",
    "context.compression.failed",
    "model.recovery.started",
    "model.recovery.succeeded",
    "model.recovery.failed",
    "store.conflict",
    "store.save_failed",
)
"""The event types the metrics read (not `context.status`, emitted before every model call)."""


def install_metrics(bus: EventBus, meter: metrics.Meter | None = None) -> None:
    """Feed the metrics from `bus` (the global meter provider's `contextkeep` meter by default)."""
    bus.subscribe(_Recorder(meter or metrics.get_meter("contextkeep")), *_RECORDED)
