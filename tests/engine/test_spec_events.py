"""The Agents-Flex monitoring list and event names, and AgentScope's `compress_context`.

Store save failures are counted by store and kind, the REQUIRED→COMPLETED latency of a
deferred compression is measured (across a restart: the time is persisted with the flag),
the Agents-Flex event catalogue maps onto our events with its camelCase field names, and
`compress_context(context_config=...)` compacts with a temporary config.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import psycopg
import pytest
import sqlalchemy as sa
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import contextkeep as ck
from contextkeep import _events as events
from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import StoreError
from contextkeep._events import Event, EventBus
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._metrics import install_metrics
from contextkeep._session import Session
from contextkeep._usage import Usage
from contextkeep.models.adapter import ModelReply
from contextkeep.stores import SQLStore
from support import collect, rounds, service_unavailable

POSTGRES = os.environ.get("CONTEXTKEEP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

# The seed's event catalogue, and the fields its MODEL_COMPLETED table names.
SEED_EVENTS = {
    "MODEL_COMPLETED",
    "CONTEXT_COMPRESSION_REQUIRED",
    "CONTEXT_COMPRESSION_STARTED",
    "CONTEXT_COMPRESSION_COMPLETED",
    "CONTEXT_COMPRESSION_FAILED",
}
MODEL_COMPLETED_FIELDS = {
    "inputTokens",
    "outputTokens",
    "totalTokens",
    "usageSource",
    "modelKey",
    "contextWindowTokens",
    "modelMaxOutputTokens",
    "reservedOutputTokens",
    "nextCallBaselineTokens",
    "baselineRatio",
    "remainingBaselineTokens",
    "compressionRequired",
    "usageBaselineValid",
    "usageStatus",
}


def metered() -> tuple[InMemoryMetricReader, EventBus]:
    """A bus whose metrics go to an in-memory OpenTelemetry reader."""
    reader = InMemoryMetricReader()
    bus = EventBus()
    install_metrics(bus, MeterProvider(metric_readers=[reader]).get_meter("test"))
    return reader, bus


def points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], Any]]:
    """(attributes, data point) of metric `name`, sorted by attributes."""
    data = reader.get_metrics_data()
    found = [
        (dict(p.attributes or {}), p)
        for rm in (data.resource_metrics if data else [])
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for p in metric.data.data_points
    ]
    return sorted(found, key=lambda item: sorted(item[0].items()))


def make_manager(tmp_path: Path, store: str | None = None, bus: EventBus | None = None) -> ContextManager:
    return ContextManager(
        ModelSpec("m", 10_000, max_output_tokens=2_000),
        config=ContextConfig(reserved_tokens=1_000, min_keep_tokens=0),
        store=store,
        workspace=tmp_path / "ws",
        tokenizer="heuristic",
        events=bus,
    )


async def schedule_compression(session: Session) -> None:
    """A long history, then a reply whose confirmed usage is over the 0.85 threshold (8,010 / 9,000)."""
    await session.add([{"role": "system", "content": "s"}, {"role": "user", "content": "task"}, *rounds(20)])
    await session.prepare()
    await session.record(ModelReply(Message("assistant", "a"), Usage(input_tokens=8_000, output_tokens=10)))
    await session.add({"role": "user", "content": "again"})
    assert session.state.compression_required


# Monitoring: failed saves.


def _cap_file_size(dbapi_connection: Any, _record: Any) -> None:
    # SQLite clamps the limit to the current size: the file cannot grow, as on a full disk.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA max_page_count = 1")
    cursor.close()


async def test_a_full_sqlite_database_counts_one_failed_transcript_save(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ck.db'}"
    first = make_manager(tmp_path, url)
    async with first.session("c") as s:
        await s.add([{"role": "system", "content": "s"}, {"role": "user", "content": "task"}])
    await first.close()
    reader, bus = metered()
    failed = collect(bus, events.StoreSaveFailed)
    cm = make_manager(tmp_path, url, bus)
    assert isinstance(cm.store, SQLStore)
    sa.event.listen(cm.store.engine.sync_engine, "connect", _cap_file_size)
    async with cm.session("c") as s:
        with pytest.raises(StoreError, match="full"):
            await s.add({"role": "assistant", "content": "x" * 200_000})
        assert len(s.transcript) == 2  # loading still works: only the save failed
    await cm.close()
    [(attributes, point)] = points(reader, "contextkeep.store.save_failures")
    assert (attributes, point.value) == ({"store": "sqlite", "kind": "transcript"}, 1)
    assert [(e.store, e.kind) for e in failed] == [("sqlite", "transcript")]
    assert "full" in failed[0].error
    assert points(reader, "contextkeep.store.cas_conflicts") == []  # a failure is not a lost race


class AppRole(NamedTuple):
    admin_url: str
    """The superuser, under a fresh table prefix."""
    app_url: str
    """A role of its own (it starts with no privileges), under the same prefix."""
    prefix: str
    role: str


@pytest.fixture
def postgres_app_role() -> Iterator[AppRole]:
    """A PostgreSQL table prefix and an application role, both dropped afterwards."""
    parts = urlsplit(POSTGRES)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), 1).close()
    except OSError as exc:
        service_unavailable("postgresql", str(exc))
    prefix, role = f"ev{uuid.uuid4().hex[:10]}_", f"ck_app_{uuid.uuid4().hex[:10]}"
    tables = [f"{prefix}{name}" for name in ("messages", "documents", "leases", "schema_version")]
    app = sa.make_url(POSTGRES).set(username=role).render_as_string(hide_password=False)
    with psycopg.connect(POSTGRES, autocommit=True) as db:
        db.execute(f"CREATE ROLE {role} LOGIN")
    try:
        yield AppRole(f"{POSTGRES}?table_prefix={prefix}", f"{app}?table_prefix={prefix}", prefix, role)
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as db:
            db.execute(f"DROP TABLE IF EXISTS {', '.join(tables)}")
            db.execute(f"DROP OWNED BY {role}")
            db.execute(f"DROP ROLE {role}")


@pytest.mark.services
async def test_postgres_refusing_document_writes_counts_failed_compaction_and_usage_saves(
    tmp_path: Path, postgres_app_role: AppRole
) -> None:
    admin_url, app_url, prefix, role = postgres_app_role
    admin = make_manager(tmp_path, admin_url)
    async with admin.session("c") as s:
        await schedule_compression(s)
    await admin.close()
    # The application may read every table but write only the transcript and leases:
    # a grant forgotten on the documents table.
    with psycopg.connect(POSTGRES, autocommit=True) as db:
        db.execute(f"GRANT SELECT ON {prefix}messages, {prefix}documents, {prefix}schema_version TO {role}")
        db.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {prefix}leases TO {role}")
        db.execute(f"GRANT INSERT ON {prefix}messages TO {role}")
    reader, bus = metered()
    failed = collect(bus, events.StoreSaveFailed)
    cm = make_manager(tmp_path, app_url, bus)
    async with cm.session("c") as s:
        with pytest.raises(StoreError, match="permission denied"):
            await s.prepare()  # consumes the deferred flag: the compaction state cannot be saved
        with pytest.raises(StoreError, match="permission denied"):
            await s.record(ModelReply(Message("assistant", "b"), Usage(input_tokens=900, output_tokens=5)))
    await cm.close()
    got = [(a, p.value) for a, p in points(reader, "contextkeep.store.save_failures")]
    assert got == [
        ({"store": "postgresql", "kind": "compaction"}, 1),
        ({"store": "postgresql", "kind": "usage"}, 1),
    ]
    assert all("permission denied" in e.error for e in failed)


# Monitoring: REQUIRED → COMPLETED.


async def test_a_deferred_compression_records_its_required_to_completed_latency_after_a_restart(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'ck.db'}"
    before = EventBus()
    required = collect(before, events.CompressionRequired)
    first = make_manager(tmp_path, url, before)
    async with first.session("c") as s:
        await schedule_compression(s)
    await first.close()
    # A new process: it never saw the required event, only the persisted flag.
    reader, bus = metered()
    completed = collect(bus, events.CompressionCompleted)
    cm = make_manager(tmp_path, url, bus)
    async with cm.session("c") as s:
        view = await s.prepare()
        assert view.compacted
        await s.prepare()  # nothing pending any more
    await cm.close()
    [(attributes, point)] = points(reader, "contextkeep.compression.required_latency")
    assert attributes == {"reason": "THRESHOLD_REACHED"}
    assert point.count == 1
    waited = (completed[0].timestamp - required[0].timestamp) * 1000
    assert point.sum == pytest.approx(waited) and waited >= 0


# Agents-Flex names.


def test_every_agents_flex_event_maps_to_one_of_our_events_and_back() -> None:
    members = list(ck.AgentsFlexEvent)
    assert {str(m) for m in members} == SEED_EVENTS
    classes = {m.event_class for m in members}
    assert len(classes) == len(members) and all(issubclass(c, Event) for c in classes)
    for member in members:
        assert ck.AgentsFlexEvent.of(member.event_class) is member
        assert ck.AgentsFlexEvent.of(member.event_class()) is member
        assert ck.AgentsFlexEvent.of(member.event_type) is member
        assert member.event_type == member.event_class.type
    assert ck.AgentsFlexEvent.of(events.ContextStatus) is None  # not in the Agents-Flex catalogue


async def test_a_real_model_completed_in_agents_flex_form_has_exactly_the_seed_fields(tmp_path: Path) -> None:
    bus = EventBus()
    seen = collect(bus, events.ModelCompleted)
    cm = make_manager(tmp_path, bus=bus)
    async with cm.session("conversation-1001") as s:
        await s.add([{"role": "system", "content": "s"}, {"role": "user", "content": "退款进度?"}])
        await s.prepare()
        await s.record(ModelReply(Message("assistant", "ok"), Usage(1_200, 300, 1_500)))
    event = seen[0].to_agents_flex()
    assert event["type"] == ck.AgentsFlexEvent.MODEL_COMPLETED == "MODEL_COMPLETED"
    assert event["conversationId"] == "conversation-1001"
    data = event["data"]
    assert set(data) == MODEL_COMPLETED_FIELDS
    # What the seed's listener reads.
    assert data["usageBaselineValid"] is True and data["usageStatus"] == "CONFIRMED_BASELINE"
    assert (data["nextCallBaselineTokens"], data["remainingBaselineTokens"]) == (1_500, 7_500)
    assert data["baselineRatio"] == pytest.approx(1_500 / 9_000)


async def test_agents_flex_form_leaves_out_ratio_and_remaining_without_a_confirmed_baseline(
    tmp_path: Path,
) -> None:
    bus = EventBus()
    seen = collect(bus, events.ModelCompleted)
    async with make_manager(tmp_path, bus=bus).session("c") as s:
        await s.add([{"role": "user", "content": "hi"}])
        await s.record(ModelReply(Message("assistant", "ok"), Usage()))
    data = seen[0].to_agents_flex()["data"]
    assert "baselineRatio" not in data and "remainingBaselineTokens" not in data
    assert (data["usageSource"], data["usageStatus"], data["usageBaselineValid"]) == (
        "UNAVAILABLE",
        "NO_CONFIRMED_USAGE",
        False,
    )


async def test_a_deferred_compression_reads_in_agents_flex_form_with_the_seed_fields(tmp_path: Path) -> None:
    bus = EventBus()
    seen = collect(bus, Event)
    async with make_manager(tmp_path, bus=bus).session("c") as s:
        await schedule_compression(s)
        await s.prepare()
    flex = [e.to_agents_flex() for e in seen]
    by_type = {e["type"]: e["data"] for e in flex}
    assert {
        "MODEL_COMPLETED",
        "CONTEXT_COMPRESSION_REQUIRED",
        "CONTEXT_COMPRESSION_STARTED",
        "CONTEXT_COMPRESSION_COMPLETED",
    } <= set(by_type)
    required = by_type["CONTEXT_COMPRESSION_REQUIRED"]
    assert required["reason"] == "THRESHOLD_REACHED" and required["compressionBeforeNextCall"] is True
    assert required["nextCallBaselineTokens"] == 8_010 and required["thresholdRatio"] == 0.85
    done = by_type["CONTEXT_COMPRESSION_COMPLETED"]
    assert (done["usageStatus"], done["compressionRequired"], done["usageBaselineValid"]) == (
        "BASELINE_INVALIDATED",
        False,
        False,
    )
    assert done["compressionReason"] == "THRESHOLD_REACHED"
    # Events outside the catalogue keep their own type, in the same shape.
    assert "context.status" in {e["type"] for e in flex}


# AgentScope's compress_context.


async def test_compress_context_compacts_with_the_given_config_and_leaves_the_sessions_own(
    tmp_path: Path,
) -> None:
    async with make_manager(tmp_path).session("c") as s:
        await s.add([{"role": "system", "content": "s"}, {"role": "user", "content": "task"}, *rounds(30)])
        own = s.config
        tokens = (await s.current_view()).tokens
        assert 0.3 * 10_000 < tokens < 0.7 * 10_000  # under the session's trigger, over the one given
        assert await s.compress_context() is None  # the session's config: below its trigger, a no-op
        outcome = await s.compress_context(context_config=ContextConfig(trigger_ratio=0.3, reserve_ratio=0.1))
        assert outcome is not None and outcome.tokens < tokens
        assert s.state.records[-1].reason == "MANUAL"
        assert s.config is own and s.config.trigger_ratio is None
