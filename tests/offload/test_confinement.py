"""A conversation reads only its own offloaded files (and the shared data files), whatever the reference.

The path is normalised before it is judged, by one function that the recall tool, the
server's reference route and every workspace backend use.
"""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
import tempfile
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contextkeep._agent.recall import recall_tool
from contextkeep._agent.tools import ToolError
from contextkeep._capabilities import ModelSpec
from contextkeep._errors import UnsafePathError
from contextkeep._manager import ContextManager
from contextkeep._offload import FsspecWorkspace, LocalWorkspace, Workspace
from contextkeep.server import ServerSettings, create_app

ESCAPES = ("sessions/A/../B/tool_result-k1.txt", "data/../sessions/B/tool_result-k1.txt")
"""The two escapes of issue #19: conversation B's file through conversation A."""
REFUSED = (
    *ESCAPES,
    "sessions/B/tool_result-k1.txt",
    "sessions/A/../../secret.txt",
    "sessions/A/tool_result-k1.txt\x00.png",
    "/etc/passwd",
    "sessions\\A\\..\\B\\tool_result-k1.txt",
    "sessions/A/" + "x" * 300,
)


async def two_conversations(root: Path) -> ContextManager:
    """Conversations A and B, each with an offloaded result of call `k1`, and a secret beside the root."""
    (root.parent / "secret.txt").write_text("outside the workspace")
    cm = ContextManager(ModelSpec("test-model", 4000), workspace=root, tokenizer="heuristic")
    for conversation in ("A", "B"):
        async with cm.session(conversation) as s:
            await s.add({"role": "user", "content": f"hello from {conversation}"})
        await cm.workspace.offload_tool_result(conversation, "k1", f"{conversation}'s own result")
    return cm


async def test_the_recall_tool_refuses_the_escapes(tmp_path: Path) -> None:
    cm = await two_conversations(tmp_path / "ws")
    recall = recall_tool(cm.workspace, "A")
    assert await recall.call(json.dumps({"reference": "sessions/A/tool_result-k1.txt"})) == "A's own result"
    for reference in REFUSED:
        with pytest.raises(ToolError, match="reference") as refused:
            await recall.call(json.dumps({"reference": reference}))
        assert "B's own result" not in str(refused.value)
    await cm.close()


async def test_the_server_route_refuses_the_escapes(tmp_path: Path) -> None:
    cm = await two_conversations(tmp_path / "ws")
    app = create_app(ServerSettings(), manager=cm)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        own = await client.get("/api/conversations/A/references/sessions/A/tool_result-k1.txt")
        assert own.status_code == 200 and own.text == "A's own result"
        for reference in REFUSED:
            # Percent-encoded, so the client sends the dots and backslashes as they are.
            quoted = "/".join(
                part.replace("%", "%25").replace(".", "%2E").replace("\\", "%5C").replace("\x00", "%00")
                for part in reference.split("/")
            )
            answer = await client.get(f"/api/conversations/A/references/{quoted}")
            assert answer.status_code == 400, (reference, answer.status_code, answer.text)
            assert "own result" not in answer.text and "outside the workspace" not in answer.text
    await cm.close()


async def test_every_backend_refuses_what_leaves_its_root(tmp_path: Path) -> None:
    fsspec = FsspecWorkspace(f"memory://confined-{os.getpid()}")
    for workspace in (LocalWorkspace(tmp_path / "ws"), fsspec):
        for reference in ("../secret.txt", "data/../../secret.txt", "/etc/passwd", "x\x00y"):
            with pytest.raises(UnsafePathError):
                await workspace.read(reference)
            with pytest.raises(UnsafePathError):
                workspace.locate(reference)
        for reference in ESCAPES:
            with pytest.raises(UnsafePathError, match="not a reference of this conversation"):
                await workspace.resolve("A", reference)


# -- properties -----------------------------------------------------------------------------

ROOT = "/ws"
SEGMENTS = st.sampled_from(["sessions", "A", "B", "data", "..", ".", "", "x.txt", "context.jsonl#m1..m2"])
PATHS = st.builds(
    lambda lead, parts: lead + "/".join(parts),
    st.sampled_from(["", "sessions/A/", "sessions/A/", "data/", "sessions/", "/", "./"]),
    st.lists(st.one_of(SEGMENTS, st.text(min_size=1, max_size=12)), min_size=1, max_size=8),
)


def lands_in(path: str) -> str:
    """Where `path` lands under the root, resolved by the OS's own path rules (no symlinks here)."""
    return os.path.normpath(os.path.join(ROOT, path.split("#", 1)[0]))


def allowed(where: str) -> bool:
    return where.startswith((f"{ROOT}/sessions/A/", f"{ROOT}/data/"))


NO_IO = FsspecWorkspace("memory://never-written")
"""Resolving a reference reads nothing: one workspace serves every example."""


def resolved(workspace: Workspace, conversation: str, reference: str) -> str | None:
    """What the workspace resolves `reference` of `conversation` to (None: refused)."""
    try:
        return asyncio.run(workspace.resolve(conversation, reference))
    except UnsafePathError as exc:
        assert repr(reference) in str(exc)  # it names the reference
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATHS)
def test_an_accepted_reference_resolves_inside_the_conversation(reference: str) -> None:
    confined = resolved(NO_IO, "A", reference)
    if confined is None:
        return
    path = reference.split("#", 1)[0]  # what follows `#` names messages, not files
    assert "\x00" not in reference and "\\" not in path and not path.startswith("/")
    assert allowed(lands_in(confined)) and lands_in(confined) == lands_in(reference)
    assert posixpath.normpath(confined.split("#", 1)[0]) == confined.split("#", 1)[0]  # normalised


@settings(max_examples=200, deadline=None)
@given(PATHS)
def test_a_reference_that_escapes_is_refused(reference: str) -> None:
    escapes = not allowed(lands_in(reference)) or reference.startswith("/")
    if escapes or "\x00" in reference:
        assert resolved(NO_IO, "A", reference) is None


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=300))
@example("A", "call" * 75)  # a clean id too long for a file name as it is
def test_every_offloaded_result_reads_back_in_its_conversation_only(conversation: str, call_id: str) -> None:
    async def check(root: str) -> None:
        workspace = LocalWorkspace(root)
        reference = await workspace.offload_tool_result(conversation, call_id, "the result")
        arguments = json.dumps({"reference": reference})
        assert await recall_tool(workspace, conversation).call(arguments) == "the result"
        with pytest.raises(ToolError, match="not a reference of this conversation"):
            await recall_tool(workspace, conversation + "-other").call(arguments)

    with tempfile.TemporaryDirectory() as root:
        asyncio.run(check(root))
