"""The event bus and the context.status event."""

from __future__ import annotations

import asyncio
import logging

import pytest

from contextkeep._budget import Budget, ContextState
from contextkeep._events import ContextStatus, Event, EventBus, ModelCompleted
from contextkeep._tokens import CountSource
from support import wait_until


def test_status_event_carries_the_seed_fields_and_more() -> None:
    event = ContextStatus.measure(
        19_000,
        Budget(120_000, 4_096),
        source=CountSource.LOCAL_TOKENIZER,
        layer="L1",
        conversation_id="c1",
        model_key="deepseek-chat",
        capacity_source="explicit",
    )
    data = event.to_dict()
    assert data["type"] == "context.status"
    assert {k: data[k] for k in ("used", "budget", "state", "compact_layer", "remaining", "source")} == {
        "used": 19_000,
        "budget": 115_904,
        "state": "normal",
        "compact_layer": "L1",
        "remaining": 96_904,
        "source": "local_tokenizer",
    }
    assert data["ratio"] == pytest.approx(0.164, abs=1e-3)
    assert data["conversation_id"] == "c1" and data["context_window"] == 120_000


def test_status_with_unknown_capacity_has_no_ratio() -> None:
    data = ContextStatus.measure(500, Budget(None), source=CountSource.ESTIMATE).to_dict()
    assert data["used"] == 500 and data["ratio"] is None and data["state"] is None and data["budget"] is None


async def test_sync_and_async_listeners_filters_and_unsubscribe() -> None:
    bus = EventBus()
    seen: list[str] = []
    async_seen: list[str] = []

    async def slow(event: Event) -> None:
        await asyncio.sleep(0)
        async_seen.append(event.type)

    unsubscribe = bus.subscribe(lambda e: seen.append(e.type))
    bus.subscribe(slow, "model.completed")
    status = ContextStatus(used=1, budget=None, ratio=None, state=None, remaining=None)
    await bus.aemit(status)
    await bus.aemit(ModelCompleted())
    assert seen == ["context.status", "model.completed"]
    assert async_seen == ["model.completed"]
    unsubscribe()
    bus.emit(status)
    assert seen == ["context.status", "model.completed"]
    # emit() from a running loop schedules async listeners as tasks.
    bus.emit(ModelCompleted())
    await wait_until(lambda: len(async_seen) == 2)
    assert async_seen == ["model.completed", "model.completed"]


def test_a_failing_listener_is_logged_and_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus()
    got: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("boom")

    bus.subscribe(broken)
    bus.subscribe(got.append)
    with caplog.at_level(logging.ERROR, logger="contextkeep.events"):
        bus.emit(ModelCompleted())
    assert len(got) == 1
    assert "boom" in caplog.text


def test_emit_without_a_loop_runs_async_listeners() -> None:
    bus = EventBus()
    got: list[str] = []

    async def listener(event: Event) -> None:
        got.append(event.type)

    bus.subscribe(listener)
    bus.emit(ModelCompleted())
    assert got == ["model.completed"]
    assert ContextState.NORMAL.value == "normal"
