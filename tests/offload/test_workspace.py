"""Offload workspaces: layout, atomic appends without duplicates, private files, path safety."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from contextkeep._errors import UnsafePathError, WorkspaceError
from contextkeep._messages import Message
from contextkeep._offload import FsspecWorkspace, LocalWorkspace, Offloader, Workspace


@pytest.fixture(params=["local", "fsspec-memory"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Workspace:
    if request.param == "local":
        return LocalWorkspace(tmp_path / "ws")
    return FsspecWorkspace(f"memory://ck-{os.getpid()}-{id(request)}")


def msgs(*ids: str) -> list[Message]:
    return [Message("user", f"text {i}", id=i) for i in ids]


async def test_layout_and_read_back(workspace: Workspace) -> None:
    assert isinstance(workspace, Offloader)
    ref = await workspace.offload_tool_result("conv-1", "call_7", "full output " * 100)
    assert ref == "sessions/conv-1/tool_result-call_7.txt"
    assert await workspace.read(ref) == "full output " * 100
    assert await workspace.read(ref, offset=5, limit=6) == "output"
    span = await workspace.offload_context("conv-1", msgs("m1", "m2", "m3"))
    assert span == "sessions/conv-1/context.jsonl#m1..m3"
    await workspace.offload_context("conv-1", msgs("m4", "m5"))
    lines = (await workspace.read("sessions/conv-1/context.jsonl#m2..m4")).splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["m2", "m3", "m4"]


async def test_context_appends_never_duplicate_a_message(workspace: Workspace) -> None:
    await workspace.offload_context("c", msgs("m1", "m2"))
    await workspace.offload_context("c", msgs("m2", "m3"))  # a retried compaction overlaps the last one
    whole = await workspace.read("sessions/c/context.jsonl")
    assert [json.loads(line)["id"] for line in whole.splitlines()] == ["m1", "m2", "m3"]


async def test_overlapping_spans_of_one_pass_are_written_once_and_in_order(workspace: Workspace) -> None:
    await workspace.offload_context("c", [*msgs("m1", "m2", "m3"), *msgs("m1", "m2", "m3", "m4")])
    whole = await workspace.read("sessions/c/context.jsonl")
    assert [json.loads(line)["id"] for line in whole.splitlines()] == ["m1", "m2", "m3", "m4"]


async def test_a_failed_append_is_written_by_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = LocalWorkspace(tmp_path)
    real = workspace._append

    def full_disk(path: str, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(workspace, "_append", full_disk)
    with pytest.raises(OSError):
        await workspace.offload_context("c", msgs("m1", "m2"))
    monkeypatch.setattr(workspace, "_append", real)
    await workspace.offload_context("c", msgs("m1", "m2"))  # the compaction is retried
    lines = (tmp_path / "sessions/c/context.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["m1", "m2"]


async def test_a_restarted_workspace_still_does_not_duplicate(tmp_path: Path) -> None:
    await LocalWorkspace(tmp_path).offload_context("c", msgs("m1", "m2"))
    await LocalWorkspace(tmp_path).offload_context("c", msgs("m2", "m3"))
    lines = (tmp_path / "sessions/c/context.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["m1", "m2", "m3"]


async def test_data_is_deduplicated_by_content(workspace: Workspace) -> None:
    a = await workspace.offload_data(b"\x89PNG fake", "png")
    b = await workspace.offload_data(b"\x89PNG fake", "png")
    assert a == b and a.startswith("data/") and a.endswith(".png") and len(a) == len("data/") + 64 + 4


async def test_snapshot_steps_continue_across_restarts_and_never_overwrite(tmp_path: Path) -> None:
    first = LocalWorkspace(tmp_path)
    r1 = await first.write_snapshot("c", "sql_query", {"action": "sql_query", "observation": "3 rows"})
    r2 = await first.write_snapshot("c", "code interpreter", {"action": "code"})
    assert r1.endswith("op_snapshots/step_001_sql_query.json")
    assert "op_snapshots/step_002_code_interpreter" in r2  # unsafe characters replaced
    # Another process (same folder) picks up the numbering where files end.
    again = LocalWorkspace(tmp_path)
    r3 = await again.write_snapshot("c", "sql_query", {"action": "sql_query"})
    assert "step_003_sql_query.json" in r3
    # A stale counter in the first process does not overwrite step 3.
    r4 = await first.write_snapshot("c", "sql_query", {"action": "late"})
    assert "step_004_" in r4
    assert json.loads((tmp_path / r1).read_text())["observation"] == "3 rows"
    assert json.loads((tmp_path / r3).read_text())["step"] == 3


async def test_files_are_private(tmp_path: Path) -> None:
    ws = LocalWorkspace(tmp_path)
    ref = await ws.offload_tool_result("c", "t", "secret")
    await ws.offload_context("c", msgs("m1"))
    for path in (tmp_path / ref, tmp_path / "sessions/c/context.jsonl"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "sessions/c").stat().st_mode) == 0o700


@pytest.mark.parametrize(
    "session_id", ["../escape", "../../etc", "/etc/passwd", "a/../../b", "..", ".", "x\\..\\y", "c:evil"]
)
async def test_ids_cannot_escape_the_root(tmp_path: Path, session_id: str) -> None:
    root = tmp_path / "ws"
    ws = LocalWorkspace(root)
    ref = await ws.offload_tool_result(session_id, "../../t", "data")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(p.resolve().is_relative_to(root.resolve()) for p in written)
    assert ref.startswith("sessions/") and ".." not in ref.split("/")
    assert await ws.read(ref) == "data"


async def test_distinct_unsafe_ids_do_not_collide(tmp_path: Path) -> None:
    ws = LocalWorkspace(tmp_path)
    a = await ws.offload_tool_result("c", "a/b", "one")
    b = await ws.offload_tool_result("c", "a_b", "two")
    assert a != b and await ws.read(a) == "one" and await ws.read(b) == "two"


@pytest.mark.parametrize(
    "reference", ["/etc/passwd", "../outside.txt", "sessions/../../x", "C:/x", "", "sessions\\..\\x"]
)
async def test_reading_outside_the_root_is_refused(tmp_path: Path, reference: str) -> None:
    (tmp_path / "outside.txt").write_text("no")
    ws = LocalWorkspace(tmp_path / "ws")
    with pytest.raises(UnsafePathError):
        await ws.read(reference)
    with pytest.raises(UnsafePathError):
        ws.locate(reference)


async def test_missing_reference_is_a_clear_error(workspace: Workspace) -> None:
    with pytest.raises(WorkspaceError, match="nothing stored"):
        await workspace.read("sessions/none/tool_result-x.txt")


async def test_empty_ids_are_rejected(workspace: Workspace) -> None:
    with pytest.raises(UnsafePathError, match="session id"):
        await workspace.offload_tool_result("", "t", "x")
