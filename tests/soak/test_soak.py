"""Soak (#19 acceptance): N processes × M steps on one conversation, with random SIGKILLs.

Every worker (`support/race_worker.py`) reuses the call ids `call_0` and `call_1`, appends a
round and prepares a view per step, on a window small enough that masking (L1) and summaries
(L3) happen every few steps; the test SIGKILLs a random worker at random moments (whatever
it is doing: appending, offloading, compacting, holding the lease) and starts it again. Then
the checker (`support/soak_check.py`): every reference in every final view and in the
transcript returns the content of the messages it names, nothing acknowledged is missing or
stored twice, and the final views of all instances are byte-identical.

Knobs: `CONTEXTKEEP_SOAK_PROCS` (default 3), `CONTEXTKEEP_SOAK_STEPS` (default 20),
`CONTEXTKEEP_SOAK_KILLS` (at most this many SIGKILLs, default 2 per process),
`CONTEXTKEEP_SOAK_SEED` (random by default; the failure message names it), and
`CONTEXTKEEP_SOAK_REPORT` (a file the figures are appended to as a JSON line).
"""

from __future__ import annotations

import json
import os
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from support import service_unavailable
from support.race_worker import build_manager, run_workers
from support.soak_check import check, load_transcript
from support.store_worker import SYSTEM, TASK, build_config, drop, store_url, unreachable

pytestmark = [pytest.mark.slow, pytest.mark.services]

PROCS = int(os.environ.get("CONTEXTKEEP_SOAK_PROCS", "3"))
STEPS = int(os.environ.get("CONTEXTKEEP_SOAK_STEPS", "20"))
KILLS = int(os.environ.get("CONTEXTKEEP_SOAK_KILLS", str(2 * PROCS)))


@pytest.mark.parametrize("backend", ["postgresql", "redis"])
async def test_soak_with_random_kills_loses_nothing_and_every_reference_reads_back(
    backend: str, tmp_path: Path
) -> None:
    if reason := unreachable(backend):
        service_unavailable(backend, reason)
    seed = int(os.environ.get("CONTEXTKEEP_SOAK_SEED") or random.randrange(2**32))
    url = store_url(backend, f"soak{uuid.uuid4().hex[:10]}", tmp_path)
    folder = tmp_path / "run"
    folder.mkdir()
    # A short lease: a worker killed while compacting must not stall the others for long.
    config = build_config(lease_ttl_ms=1500).model_dump(mode="json", exclude_defaults=True)
    spec: dict[str, Any] = {
        "store": url,
        "workspace": str(tmp_path / "ws"),
        "summaries": str(tmp_path / "summaries.jsonl"),
        "conversation": f"conv-{uuid.uuid4().hex[:8]}",
        "folder": str(folder),
        "window": 2000,
        "config": config,
        "steps": STEPS,
    }
    workers = [chr(ord("a") + i) for i in range(PROCS)]
    try:
        cm = build_manager(spec)
        async with cm.session(spec["conversation"]) as s:
            await s.add([SYSTEM, TASK])
        await cm.close()
        run = await run_workers(spec, workers, random.Random(seed), KILLS)
        transcript = await load_transcript(url, spec["conversation"])
    finally:
        await drop(url)
    found = await check(transcript, tmp_path / "ws", run.views, run.journals)
    summaries = (
        len(Path(spec["summaries"]).read_text().splitlines()) if Path(spec["summaries"]).exists() else 0
    )
    figures = {
        "backend": backend,
        "procs": PROCS,
        "steps": STEPS,
        "seed": seed,
        "kills": run.kills,
        "conflicts": run.conflicts,
        "summaries": summaries,
        **found.figures(),
    }
    if report := os.environ.get("CONTEXTKEEP_SOAK_REPORT"):
        with open(report, "a") as out:
            out.write(json.dumps({**figures, "first_problems": found.problems[:10]}) + "\n")
    assert found.problems == [], (figures, found.problems[:10])
    # Every round stored once, restarts included (a kill between the store and the journal
    # leaves a round stored but not acknowledged: the restarted worker goes on after it).
    assert found.messages == 2 + 2 * PROCS * STEPS, figures
    assert run.kills > 0 and summaries > 0 and found.view_references > 0, figures
