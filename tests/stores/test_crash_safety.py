"""SIGKILL at the engine's dangerous moments, restart on the same store and workspace, lose nothing.

The worker (`store_worker.py`) wraps its store, workspace and summariser and kills
itself the n-th time it reaches a named point; n is chosen so that a compaction
(with a summary) has already been saved. A new process then continues the
conversation to the end, and the test checks the result from the store and the
workspace alone.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from contextkeep._compaction.state import CompactionState
from contextkeep._messages import Message
from contextkeep._rounds import split_rounds
from contextkeep.stores import open_store
from support import assert_references_readable, backends
from support.seeded_store import seeded_spec
from support.store_worker import (
    SYSTEM,
    TASK,
    ProbeStore,
    Trip,
    assert_offloads_intact,
    build_manager,
    finish,
    journal,
    launch,
    store_url,
    tag,
)

# Each test runs worker processes to a SIGKILL and a restart.
pytestmark = pytest.mark.slow

STEPS = 24
TTL_MS = 500  # short, so a restart waits little for a dead holder's compaction lease
# point -> n-th arrival that kills (see `Trip`): the 2nd summary's compaction, or the 3rd round after
# the 1st summary; either way the restart works on top of a saved summary.
POINTS = {"after_offload": 2, "before_save": 2, "during_summary": 2, "between_appends": 3}


@pytest.fixture(params=backends("sqlite", "postgresql"))
async def spec(request, tmp_path):
    # "split": call and result in separate appends, as an agent loop records them.
    fields = {"steps": STEPS, "lease_ttl_ms": TTL_MS, "worker": "a", "split": True}
    async with seeded_spec(request.param, "cs", tmp_path, **fields) as spec:
        yield spec


def run_worker(spec, tmp_path: Path, name: str, **extra) -> int:
    err = tmp_path / f"{name}.err"
    return finish(launch({**spec, "journal": str(tmp_path / f"{name}.journal"), **extra}, err), err)


async def stored_state(spec: Mapping[str, Any]) -> tuple[list[Message], CompactionState]:
    cm = build_manager(spec)
    try:
        async with cm.session(spec["conversation"]) as s:
            return list(s.transcript), s.state
    finally:
        await cm.close()


@pytest.mark.parametrize("point", POINTS)
async def test_restart_after_sigkill_loses_and_duplicates_nothing(spec, point, tmp_path: Path) -> None:
    rc = run_worker(spec, tmp_path, "killed", kill=point, nth=POINTS[point])
    assert rc == -signal.SIGKILL, (tmp_path / "killed.err").read_text()[-3000:]
    before, state = await stored_state(spec)
    # The kill came after a saved summary, so the restart works on top of a compacted state.
    assert any(r.layer == "L3" for r in state.records)
    # What the store acknowledged is durable, before any restart could write it again.
    accepted = journal(tmp_path / "killed.journal")
    assert [tag(m) for m in before[2:]] == accepted

    rc = run_worker(spec, tmp_path, "restarted")
    assert rc == 0, (tmp_path / "restarted.err").read_text()[-3000:]

    cm = build_manager(spec)
    try:
        async with cm.session(spec["conversation"]) as s:
            view = await s.prepare()
            transcript, state = list(s.transcript), s.state
        split_rounds(view.neutral)  # pairing intact
        await assert_references_readable(cm.workspace, view.neutral)
        await assert_offloads_intact(cm, spec["conversation"], transcript, state)
    finally:
        await cm.close()
    # Nothing lost, nothing duplicated: exactly the conversation a run without a crash makes.
    expected = [f"system:{SYSTEM['content'][:20]}", f"user:{TASK['content'][:20]}"]
    expected += [f"a_{i}:{kind}" for i in range(STEPS) for kind in ("call", "result")]
    tags = [tag(m) for m in transcript]
    assert tags == expected
    assert tags[2 : 2 + len(accepted)] == accepted  # every message the killed worker's store accepted
    assert [m.id for m in transcript] == [f"m{i:06d}" for i in range(len(transcript))]
    summaries = [r for r in state.records if r.layer == "L3"]
    for earlier, later in pairwise(summaries):
        assert earlier.last <= later.first


async def test_a_killed_lease_holder_is_taken_over_after_the_ttl(tmp_path: Path, monkeypatch) -> None:
    ttl = 1500
    spec: dict[str, Any] = {
        "store": store_url("sqlite", "lease", tmp_path),
        "workspace": str(tmp_path / "ws"),
        "summaries": str(tmp_path / "summaries.jsonl"),
        "conversation": "conv-lease",
        "steps": STEPS,
        "lease_ttl_ms": ttl,
        "worker": "a",
    }
    cm = build_manager(spec)
    async with cm.session(spec["conversation"]) as s:
        await s.add([SYSTEM, TASK])
    await cm.close()
    # Killed inside its first summary: it holds the compaction lease and never gives it back. Its lease
    # owner slots live elsewhere (as on another host), so only the TTL frees its lease.
    with monkeypatch.context() as env:
        env.setenv("TMPDIR", str(tmp_path / "another-host"))
        (tmp_path / "another-host").mkdir()
        assert run_worker(spec, tmp_path, "killed", kill="during_summary", nth=1) == -signal.SIGKILL
    killed_at = time.monotonic()
    (attempt,) = [json.loads(line) for line in Path(spec["summaries"]).read_text().splitlines()]

    store = ProbeStore(open_store(spec["store"]), Trip(None, 0))
    assert not await store.inner.acquire_lease(spec["conversation"], "compaction", "probe", ttl)  # still held
    cm = build_manager(spec, store=store)
    try:
        async with cm.session(spec["conversation"]) as s:
            view = await s.prepare()
        waited = time.monotonic() - killed_at
    finally:
        await cm.close()
    # This instance waited for the lease, took it over once expired, and finished the summary.
    assert store.leases[0] is False and store.leases[-1] is True, store.leases
    assert waited >= ttl / 1000 - 0.5
    assert "L3" in view.compacted
    calls = [json.loads(line) for line in Path(spec["summaries"]).read_text().splitlines()]
    assert [c["first"] for c in calls] == [attempt["first"], attempt["first"]]
    assert Counter(c["pid"] for c in calls)[attempt["pid"]] == 1
