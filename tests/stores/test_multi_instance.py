"""Two OS processes, one conversation, one store: nothing lost, nothing paid twice, one view.

Each worker (`store_worker.py`) runs its own `ContextManager` on the same store URL
and workspace and, step after step, appends a tool round and prepares a view; the
window is small so masking and summaries happen every few steps and the two
instances race on appends and on the compaction lease. Steps per worker:
`CONTEXTKEEP_SOAK_STEPS` (default 150).
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest

from contextkeep._formats.openai import from_openai
from contextkeep._rounds import split_rounds
from support import assert_references_readable, service_unavailable
from support.store_worker import (
    SYSTEM,
    TASK,
    assert_offloads_intact,
    build_manager,
    drop,
    finish,
    journal,
    launch,
    store_url,
    tag,
    unreachable,
)

# Two worker processes on a PostgreSQL or Redis store.
pytestmark = [pytest.mark.slow, pytest.mark.services]

STEPS = int(os.environ.get("CONTEXTKEEP_SOAK_STEPS", "150"))
WORKERS = ("a", "b")


@pytest.fixture(params=["postgresql", "redis"])
async def spec(request, tmp_path):
    if reason := unreachable(request.param):
        service_unavailable(request.param, reason)
    prefix = f"mi{uuid.uuid4().hex[:10]}"
    url = store_url(request.param, prefix, tmp_path)
    yield {
        "store": url,
        "workspace": str(tmp_path / "ws"),
        "summaries": str(tmp_path / "summaries.jsonl"),
        "conversation": f"conv-{prefix}",
        "steps": STEPS,
    }
    await drop(url)


async def test_two_processes_share_one_conversation(spec, tmp_path: Path) -> None:
    cm = build_manager(spec)
    async with cm.session(spec["conversation"]) as s:
        await s.add([SYSTEM, TASK])
    await cm.close()

    procs = {}
    for w in WORKERS:
        worker = {
            **spec,
            "worker": w,
            "peers": WORKERS,
            "journal": str(tmp_path / f"{w}.journal"),
            "report": str(tmp_path / f"{w}.report"),
        }
        procs[w] = launch(worker, tmp_path / f"{w}.err")
    codes = {w: finish(proc, tmp_path / f"{w}.err") for w, proc in procs.items()}  # wait for all first
    for w, code in codes.items():
        # Every CAS conflict was resolved: a worker that gave up exits with the StoreError.
        assert code == 0, (tmp_path / f"{w}.err").read_text()[-3000:]
    reports = {w: json.loads((tmp_path / f"{w}.report").read_text()) for w in WORKERS}
    assert all(r["views"] == STEPS for r in reports.values())
    # The test proves nothing unless the two really raced.
    assert sum(r["conflicts"]["append"] for r in reports.values()) > 0, reports

    # Two fresh processes build the view from the store alone; the first may compact, the second not.
    views = []
    for i in range(2):
        out = tmp_path / f"view{i}.json"
        fresh = {**spec, "worker": f"fresh{i}", "view_out": str(out), "journal": str(tmp_path / "fresh")}
        proc = launch(fresh, tmp_path / f"fresh{i}.err")
        assert finish(proc, tmp_path / f"fresh{i}.err") == 0, (tmp_path / f"fresh{i}.err").read_text()
        views.append(out.read_bytes())
    assert views[0] == views[1]
    neutral = from_openai(json.loads(views[0]))
    split_rounds(neutral)  # pairing intact

    cm = build_manager(spec)
    async with cm.session(spec["conversation"]) as s:
        transcript, state = list(s.transcript), s.state
    try:
        await assert_references_readable(cm.workspace, neutral)
        await assert_offloads_intact(cm, spec["conversation"], transcript, state)
    finally:
        await cm.close()

    # No lost update: each worker's accepted messages are there exactly once, in its own order.
    tags = [tag(m) for m in transcript]
    assert [t for t, n in Counter(tags).items() if n > 1] == []
    for w in WORKERS:
        accepted = journal(tmp_path / f"{w}.journal")
        assert len(accepted) == 2 * STEPS
        assert [t for t in tags if t.startswith(f"{w}_")] == accepted
    assert len(transcript) == 2 + 2 * len(WORKERS) * STEPS
    # Ids are positions: no instance stamped a message from a stale length.
    assert [m.id for m in transcript] == [f"m{i:06d}" for i in range(len(transcript))]
    split_rounds(transcript)

    # The records are consistent: summaries follow each other, never back, never over the same span.
    summaries = [r for r in state.records if r.layer == "L3"]
    assert summaries, "no summary happened: the test did not exercise L3"
    for before, after in pairwise(summaries):
        assert before.first < before.last <= after.first < after.last
    assert state.summary is not None and state.summary.cursor == summaries[-1].last
    assert state.mask_boundary <= len(transcript)
    # At most one summary per compaction: every summariser call is one L3 record, span for span.
    calls = [json.loads(line) for line in Path(spec["summaries"]).read_text().splitlines()]
    assert sorted((c["first"], c["last"]) for c in calls) == [
        (f"m{r.first:06d}", f"m{r.last - 1:06d}") for r in summaries
    ]

    # Nothing summarised is lost from the workspace.
    offloaded = Path(spec["workspace"]) / "sessions" / spec["conversation"] / "context.jsonl"
    ids = {json.loads(line)["id"] for line in offloaded.read_text().splitlines()}
    assert ids >= {m.id for m in transcript[summaries[0].first : state.summary.cursor]}
