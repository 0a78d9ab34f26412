"""Offload files across instances and off the caller's path (#19 point 2, #20).

Several processes append to one conversation with reused tool-call ids (`call_0`, `call_1`,
as real agents and the shared trajectories do); a reference must always return the content
of the message it names, whichever instance lost a compare-and-set on the way. And `add`
returns without waiting for the workspace: the copy is written in the background, before any
view or state shows its reference, and re-derived from the transcript after a crash.
Steps per worker: `CONTEXTKEEP_RACE_STEPS` (default 40).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import WorkspaceError
from contextkeep._manager import ContextManager
from contextkeep._offload import LocalWorkspace
from support import assert_references_readable, call, result, service_unavailable, wait_until
from support.race_worker import build_manager, journal, launch, run_workers
from support.soak_check import check, load_transcript
from support.store_worker import SYSTEM, TASK, drop, store_url, unreachable

STEPS = int(os.environ.get("CONTEXTKEEP_RACE_STEPS", "40"))
# Masking only, from early on: nearly every result stays in the view as a preview naming its file.
MASKING = {
    "reserved_tokens": 0,
    "layers": ["L1"],
    "warning_threshold": 0.02,
    "error_threshold": 0.03,
    "target_ratio": 0.01,
    "max_observation_age_rounds": 3,
}


def race_spec(store: str, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    folder = tmp_path / "run"
    folder.mkdir()
    return {
        "store": store,
        "workspace": str(tmp_path / "ws"),
        "summaries": str(tmp_path / "summaries.jsonl"),
        "conversation": f"conv-{uuid.uuid4().hex[:8]}",
        "folder": str(folder),
        "window": 200_000,
        "config": MASKING,
        **extra,
    }


async def seed(spec: dict[str, Any]) -> None:
    cm = build_manager(spec)
    async with cm.session(spec["conversation"]) as s:
        await s.add([SYSTEM, TASK])
    await cm.close()


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.parametrize("backend", ["postgresql", "redis"])
async def test_references_name_their_own_message_when_instances_race_with_reused_call_ids(
    backend: str, tmp_path: Path
) -> None:
    if reason := unreachable(backend):
        service_unavailable(backend, reason)
    url = store_url(backend, f"or{uuid.uuid4().hex[:10]}", tmp_path)
    spec = race_spec(url, tmp_path, steps=STEPS)
    try:
        await seed(spec)
        run = await run_workers(spec, ("a", "b", "c"))
        transcript = await load_transcript(url, spec["conversation"])
    finally:
        await drop(url)
    assert run.conflicts > 0, "the instances never raced: the test proves nothing"
    found = await check(transcript, tmp_path / "ws", run.views, run.journals)
    assert found.problems == []
    assert found.view_references >= 3 * (3 * STEPS - 6)  # each view names nearly every result
    assert found.acknowledged == 2 * 3 * STEPS == found.messages - 2


class GatedWorkspace(LocalWorkspace):
    """A local workspace whose tool-result writes wait for `gate` (a slow disk the test controls)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.started = threading.Event()
        self.gate = threading.Event()

    def _replace_many(self, files: Mapping[str, bytes]) -> None:
        if any("/tool_result-" in path for path in files):
            self.started.set()
            self.gate.wait()
        super()._replace_many(files)


async def test_add_returns_before_the_copy_is_written_and_a_read_waits_for_it(tmp_path: Path) -> None:
    workspace = GatedWorkspace(tmp_path / "ws")
    cm = ContextManager(ModelSpec("m", 100_000), config=ContextConfig(reserved_tokens=0), workspace=workspace)
    text = "line of output\n" * 40
    try:
        async with cm.session("c") as s:
            stored = await asyncio.wait_for(s.add([SYSTEM, TASK, call("call_0"), result("call_0", text)]), 60)
            ref = stored[-1].metadata["ck_ref"]
            assert ref == "sessions/c/tool_result-call_0.txt"
            await asyncio.to_thread(workspace.started.wait, 60)  # the write is under way, held
            assert not Path(workspace.locate(ref)).exists()
            view = await asyncio.wait_for(s.prepare(), 60)  # the view does not wait for the write
            assert not Path(workspace.locate(ref)).exists()
            assert await assert_references_readable(workspace, view.neutral) == 0  # shown whole
            reading = asyncio.create_task(workspace.read(ref))
            for _ in range(20):
                await asyncio.sleep(0)
            assert not reading.done()  # a read of the file waits until it is written
            workspace.gate.set()
            assert await reading == text
            assert Path(workspace.locate(ref)).read_text() == text
    finally:
        workspace.gate.set()


async def test_closing_the_manager_writes_what_the_background_writer_owes(tmp_path: Path) -> None:
    """A caller that closes the manager may delete or copy the workspace right after."""
    workspace = GatedWorkspace(tmp_path / "ws")
    cm = ContextManager(ModelSpec("m", 100_000), config=ContextConfig(reserved_tokens=0), workspace=workspace)
    text = "line of output\n" * 40
    try:
        s = cm.new_session("c")
        stored = await asyncio.wait_for(s.add([SYSTEM, TASK, call("call_0"), result("call_0", text)]), 60)
        await asyncio.to_thread(workspace.started.wait, 60)
        closing = asyncio.create_task(cm.close())
        for _ in range(20):
            await asyncio.sleep(0)
        assert not closing.done()
        workspace.gate.set()
        await closing
        assert Path(workspace.locate(stored[-1].metadata["ck_ref"])).read_text() == text
    finally:
        workspace.gate.set()


async def test_a_batch_the_disk_refuses_midway_leaves_no_temporaries_and_the_next_flush_writes_it(
    tmp_path: Path,
) -> None:
    """The copies of one `add` are one batch, made durable together; a file it cannot replace fails it."""
    cm = ContextManager(
        ModelSpec("m", 100_000), config=ContextConfig(reserved_tokens=0), workspace=tmp_path / "ws"
    )
    texts = {f"call_{i}": f"output {i}\n" * 40 for i in range(6)}
    folder = tmp_path / "ws" / "sessions" / "c"
    (folder / "tool_result-call_3.txt").mkdir(parents=True)  # in the way of one copy
    async with cm.session("c") as s:
        rounds = [m for cid, text in texts.items() for m in (call(cid), result(cid, text))]
        stored = await s.add([SYSTEM, TASK, *rounds])
        with pytest.raises(WorkspaceError, match=r"tool_result-call_3\.txt"):
            await s.flush()
        assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
        (folder / "tool_result-call_3.txt").rmdir()
        await s.flush()  # the failed batch is tried again, whole
        refs = {m.tool_call_id: m.metadata["ck_ref"] for m in stored if m.role == "tool"}
        assert {cid: await cm.workspace.read(ref) for cid, ref in refs.items()} == texts
        assert sorted(p.name for p in folder.iterdir()) == sorted(f"tool_result-{cid}.txt" for cid in texts)
    await cm.close()


@pytest.mark.slow
async def test_a_process_killed_before_its_copies_are_written_loses_no_reference(tmp_path: Path) -> None:
    """The worker's disk never completes a tool-result write; it is SIGKILLed after `add` acknowledged."""
    spec = race_spec(f"sqlite:///{tmp_path / 'store.db'}", tmp_path, steps=50, hold_writes=True)
    await seed({**spec, "hold_writes": False})
    folder = Path(spec["folder"])
    proc = launch({**spec, "worker": "w", "peers": ["w"]}, folder / "w.err")
    try:
        # Every round acknowledged (then the worker waits in its final `prepare`, for the held writes).
        await wait_until(lambda: (folder / "w.done").exists() or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, (folder / "w.err").read_text()[-3000:]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    acked = journal(folder, "w")
    refs = [m.metadata.get("ck_ref") for m in await load_transcript(spec["store"], spec["conversation"])]
    assert not any(Path(spec["workspace"], r).exists() for r in refs if r)  # no copy was ever written

    # The next process re-derives every copy from the transcript before its view names one.
    cm = build_manager({**spec, "hold_writes": False})
    async with cm.session(spec["conversation"]) as s:
        view = await s.prepare()
    await cm.close()
    transcript = await load_transcript(spec["store"], spec["conversation"])
    found = await check(
        transcript, tmp_path / "ws", {"restarted": json.dumps(view.messages).encode()}, {"w": acked}
    )
    assert found.problems == []
    assert found.acknowledged == 2 * 50 and found.transcript_references == 50
    assert found.view_references > 0
