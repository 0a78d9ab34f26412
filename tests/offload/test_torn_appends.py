"""Torn appends to `context.jsonl`: a process killed inside a write, a full disk, a torn middle line.

The faults are the kernel's: a child process writes under `RLIMIT_FSIZE`, so the append that
reaches the limit is really cut short (as on a full disk), and with SIGXFSZ at its default
action the process is killed by the kernel inside the append.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contextkeep._messages import message_json
from contextkeep._offload import FsspecWorkspace, LocalWorkspace
from support.offload_faults import WORKER, batch

CONTEXT = "sessions/c/context.jsonl"


def child(mode: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """Run the fault worker; its return code and report (None when it was killed)."""
    done = subprocess.run(
        [sys.executable, str(WORKER), mode, json.dumps(spec)], capture_output=True, timeout=120, check=False
    )
    assert done.returncode >= 0 or not done.stdout, done.stderr.decode()[-3000:]
    if done.returncode:
        return done.returncode, None
    return 0, json.loads(done.stdout)


def ids_of(text: str) -> list[str]:
    return [json.loads(line)["id"] for line in text.splitlines()]


def torn_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "contextkeep.workspace" and r.levelno == logging.WARNING]


@pytest.mark.slow  # a worker process
async def test_an_append_killed_mid_write_is_fenced_and_every_message_reads_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "ws"
    first, second, third = batch(0, 10, 500), batch(10, 40, 3000), batch(50, 5, 500)
    await LocalWorkspace(root).offload_context("c", first)
    size = (root / CONTEXT).stat().st_size
    lines = [len(message_json(m).encode()) + 1 for m in second]
    cut = size + sum(lines[:20]) + lines[20] // 2  # the batch is ~120 KB: cut in its 21st line
    spec = {"root": str(root), "session": "c", "first": 10, "count": 40, "size": 3000, "limit": cut}
    code, _ = child("append", {**spec, "sigxfsz": "kill"})
    torn = (root / CONTEXT).read_bytes()
    assert len(torn) == cut and not torn.endswith(b"\n")  # what the killed process left

    restarted = LocalWorkspace(root)  # a new process: the compaction offloads the same span again
    refs = [await restarted.offload_context("c", span) for span in (first, second, third)]

    for ref, span in zip(refs, (first, second, third), strict=True):
        assert ids_of(await restarted.read(ref)) == [m.id for m in span], ref
    whole = ids_of(await restarted.read(CONTEXT))
    assert whole == [m.id for m in (*first, *second, *third)]  # each once, in order
    assert len(torn_warnings(caplog)) >= 1
    assert code == -signal.SIGXFSZ  # the kernel killed it inside the append


@pytest.mark.slow  # a worker process
async def test_a_full_disk_is_a_workspace_error_and_nothing_unwritten_counts_as_written(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    await LocalWorkspace(root).offload_context("c", batch(0, 3, 100))
    limit = (root / CONTEXT).stat().st_size + 5000
    spec = {"root": str(root), "session": "c", "first": 3, "count": 20, "size": 1000, "limit": limit}
    code, report = child("append", {**spec, "sigxfsz": "ignore"})
    assert code == 0 and report is not None
    assert report["error"] is not None and "EFBIG" in report["error"] and CONTEXT in report["error"]

    again = LocalWorkspace(root)  # space returns: the retried offload writes what did not land
    ref = await again.offload_context("c", batch(3, 20, 1000))
    assert ids_of(await again.read(ref)) == [f"m{i:04d}" for i in range(3, 23)]
    assert ids_of(await again.read(CONTEXT)) == [f"m{i:04d}" for i in range(23)]


@pytest.mark.slow  # a worker process
def test_a_session_on_a_full_disk_keeps_its_state_and_catches_up_when_space_returns(
    tmp_path: Path,
) -> None:
    code, report = child("session", {"root": str(tmp_path / "ws"), "limit": 3000, "steps": 24})
    assert code == 0 and report is not None
    assert report["error"] is not None, "the offload past the size limit did not fail"
    assert "EFBIG" in report["error"] and "context.jsonl" in report["error"]
    assert report["retried"].startswith("WorkspaceError"), report["retried"]  # still full: still refused
    assert report["saved_while_full"] is False  # no state references what was not written
    assert len(report["spans"]) >= 2
    for span in report["spans"]:
        assert span["read"] == span["named"], span["reference"]


async def test_a_torn_middle_line_is_skipped_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / CONTEXT
    path.parent.mkdir(parents=True)
    good = [message_json(m) for m in batch(1, 4, 20)]
    path.write_text(f"{good[0]}\n{good[1]}\n{good[2][:25]}\n{good[3]}\n")  # m0003 torn, then fenced
    ws = LocalWorkspace(tmp_path)
    assert ids_of(await ws.read(f"{CONTEXT}#m0001..m0004")) == ["m0001", "m0002", "m0004"]
    assert len(torn_warnings(caplog)) == 1 and "line 3" in torn_warnings(caplog)[0].getMessage()
    assert ids_of(await ws.read(CONTEXT)) == ["m0001", "m0002", "m0004"]  # the whole file too
    ref = await ws.offload_context("c", batch(3, 1, 20))  # m0003 counts as not written: written again
    assert ids_of(await ws.read(ref)) == ["m0003"]


async def test_an_object_store_fences_a_torn_tail_too() -> None:
    ws = FsspecWorkspace(f"memory://torn-{os.getpid()}")
    ws.fs.pipe_file(
        f"{ws.root}/{CONTEXT}", (message_json(batch(0, 1, 20)[0]) + "\n" + '{"id": "m00').encode()
    )
    ref = await ws.offload_context("c", batch(1, 2, 20))
    assert ids_of(await ws.read(ref)) == ["m0001", "m0002"]
    ws.fs.rm(ws.root, recursive=True)
