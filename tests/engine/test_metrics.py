"""Metrics reach an OpenTelemetry meter provider when one is configured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import ContextOverflowError, OverflowPhase
from contextkeep._events import EventBus
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._metrics import install_metrics
from contextkeep._usage import Usage
from contextkeep.models.adapter import ModelReply
from support import call, result, rounds


def points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], float]]]:
    out: dict[str, list[tuple[dict[str, Any], float]]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for p in metric.data.data_points:
                    value = p.value if isinstance(p, NumberDataPoint) else p.count
                    out.setdefault(metric.name, []).append((dict(p.attributes or {}), value))
    return out


async def test_usage_compression_recovery_and_conflicts_are_measured(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    bus = EventBus()
    install_metrics(bus, MeterProvider(metric_readers=[reader]).get_meter("test"))
    cm = ContextManager(
        ModelSpec("m", 10_000),
        config=ContextConfig(reserved_tokens=1_000, min_keep_tokens=0),
        workspace=tmp_path / "ws",
        tokenizer="heuristic",
        events=bus,
    )
    async with cm.session("c") as s:
        await s.add([{"role": "system", "content": "s"}, {"role": "user", "content": "t"}, *rounds(20)])
        await s.prepare()
        await s.record(ModelReply(Message("assistant", "a"), Usage(input_tokens=8_000, output_tokens=10)))
        await s.add({"role": "user", "content": "again"})
        await s.prepare()  # consumes the threshold flag
        await s.record(ModelReply(Message("assistant", "b"), Usage()))
        await s.add([call("x"), result("x", "y")])
        await s.recover(
            ContextOverflowError("x", phase=OverflowPhase.INPUT_CONTEXT, limit=100, requested=2_000)
        )
        # Another writer gets in first: the session's next append conflicts once, then retries.
        await cm.store.append(
            "c", [Message("user", "from elsewhere", id="zz")], expected_length=len(s.transcript)
        )
        await s.add({"role": "user", "content": "late"})
    got = points(reader)
    assert {a["usage_source"] for a, _ in got["contextkeep.model.calls"]} == {
        "PROVIDER_CONFIRMED",
        "UNAVAILABLE",
    }
    assert got["contextkeep.usage.baseline_ratio"][0][1] == 1
    assert got["contextkeep.compression.threshold_reached"] == [({}, 1)]
    reasons = {a["reason"] for a, _ in got["contextkeep.compression.outcomes"]}
    assert {"THRESHOLD_REACHED", "OVERFLOW_RECOVERY"} <= reasons
    assert got["contextkeep.compression.duration"]
    assert got["contextkeep.store.cas_conflicts"] == [({"kind": "transcript"}, 1)]
