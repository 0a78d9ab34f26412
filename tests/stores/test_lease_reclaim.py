"""The compaction lease (#19 point 7): a dead holder stalls nobody, a live one keeps its lease.

A worker process is SIGKILLed inside its first summary, holding the lease with a TTL far
longer than the test may take. Another process of the same host (this one) must take the
lease over on its first attempt and finish the summary. And a holder whose pass outlasts
the TTL keeps the lease by its heartbeat.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from contextkeep import ContextManager, ModelSpec, Session, View
from contextkeep._summarizers import SummaryRequest, SummaryResult
from contextkeep.stores import open_store
from support import backends
from support.seeded_store import seeded_spec
from support.store_worker import (
    SYSTEM,
    TASK,
    ProbeStore,
    Trip,
    build_config,
    build_manager,
    finish,
    launch,
    step_messages,
)

LONG_TTL_MS = 600_000  # waiting out a dead holder's lease could never pass within BOUND_S
BOUND_S = 60


@pytest.fixture(params=backends("sqlite", "postgresql"))
async def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    journal = str(tmp_path / "killed.journal")
    fields = {"steps": 24, "lease_ttl_ms": LONG_TTL_MS, "worker": "a", "journal": journal}
    async with seeded_spec(request.param, "ls", tmp_path, **fields) as spec:
        yield spec


@pytest.mark.slow
async def test_a_lease_held_by_a_killed_process_is_taken_over_on_the_first_attempt(
    spec, tmp_path: Path
) -> None:
    err = tmp_path / "killed.err"
    assert finish(launch({**spec, "kill": "during_summary", "nth": 1}, err), err) == -signal.SIGKILL
    (attempt,) = [json.loads(line) for line in Path(spec["summaries"]).read_text().splitlines()]
    other = open_store(spec["store"])
    try:  # the dead holder's lease is live: anyone but this host's next process would wait
        assert not await other.acquire_lease(spec["conversation"], "compaction", "another-host", 1000)
    finally:
        await other.close()

    store = ProbeStore(open_store(spec["store"]), Trip(None, 0))
    cm = build_manager(spec, store=store)
    try:
        async with asyncio.timeout(BOUND_S), cm.session(spec["conversation"]) as s:
            view = await s.prepare()
    finally:
        await cm.close()
    assert store.leases[0] is True, store.leases  # reclaimed at once, not after the TTL
    assert "L3" in view.compacted
    calls = [json.loads(line) for line in Path(spec["summaries"]).read_text().splitlines()]
    assert [c["first"] for c in calls] == [attempt["first"], attempt["first"]]  # the same span, redone


class _HeldSummarizer:
    """A summary that takes as long as the test says: it waits for `release`."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.started.set()
        await self.release.wait()
        return SummaryResult(f"Earlier work up to {request.messages[-1].id}.", method="extractive")


async def _until_a_summary_runs(s: Session, summarizer: _HeldSummarizer) -> asyncio.Task[View]:
    """Add steps and prepare after each until a pass is inside its summary; that pass, running."""
    for step in range(40):
        await s.add(list(step_messages("a", step)))
        pass_ = asyncio.ensure_future(s.prepare())
        started = asyncio.ensure_future(summarizer.started.wait())
        await asyncio.wait({pass_, started}, return_when=asyncio.FIRST_COMPLETED)
        if summarizer.started.is_set():
            return pass_
        started.cancel()
        await pass_
    raise AssertionError("no pass reached a summary")


async def test_a_live_holder_keeps_the_lease_past_its_ttl_by_the_heartbeat(tmp_path: Path) -> None:
    ttl = 400
    store = ProbeStore(open_store(f"sqlite:///{tmp_path / 'store.db'}"), Trip(None, 0))
    summarizer = _HeldSummarizer()
    cm = ContextManager(
        ModelSpec("test-model", 2000),
        config=build_config(ttl).merged(lease_heartbeat_ms=50),
        store=store,
        workspace=tmp_path / "ws",
        summarizer=summarizer,
        fallback_summarizer=None,
        tokenizer="heuristic",
    )
    try:
        async with asyncio.timeout(BOUND_S), cm.session("conv") as s:
            await s.add([SYSTEM, TASK])
            pass_ = await _until_a_summary_runs(s, summarizer)
            first = len(store.leases)
            # Renewed more often than the TTL spans: without them the lease would have lapsed.
            while len(store.leases) < first + 3 * ttl // 50:
                await asyncio.sleep(0.01)
            assert not await store.inner.acquire_lease("conv", "compaction", "another-host", ttl)
            summarizer.release.set()
            view = await pass_
        assert "L3" in view.compacted
        assert all(store.leases), store.leases  # the holder never lost it
    finally:
        await cm.close()
