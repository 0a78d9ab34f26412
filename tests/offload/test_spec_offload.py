"""Spec details of snapshots (DB-GPT), a user's own two-method offloader (AgentScope) and task progress."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pytest

from contextkeep._agent import Agent, Runner, ToolError
from contextkeep._agent.recall import recall_tool
from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig, load_config
from contextkeep._errors import ConfigError
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._offload import ActionSnapshot
from contextkeep._rounds import split_rounds
from contextkeep.models import OpenAIAdapter
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support import REFERENCE, closing, rounds

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Fix the failing test in src/app.py"}

DBGPT_FIELDS = [
    "step",
    "action",
    "phase",
    "action_intention",
    "action_reason",
    "thought",
    "action_input",
    "observation",
    "timestamp",
    "conv_id",
]


def adapter(srv: FakeLLMServer, window: int = 50_000) -> OpenAIAdapter:
    client = closing(openai.AsyncOpenAI(base_url=srv.base_url, api_key="t", max_retries=0))
    return OpenAIAdapter("fake-model", client=client, context_window=window)


def lookup(key: str) -> str:
    """Look a key up in the inventory."""
    return f"{key}: 7 units in bin {len(key)}"


def _is_utc_iso(value: str) -> bool:
    return datetime.fromisoformat(value).utcoffset() == timedelta(0)


# Point 6: snapshots hold every field DB-GPT lists.


async def test_runner_snapshots_hold_every_dbgpt_field_with_the_rounds_thought(tmp_path: Path) -> None:
    replies = [
        Reply(
            text="Bolts first: I will look them up.", tool_calls=[ToolCallSpec("lookup", {"key": "bolts"})]
        ),
        Reply(tool_calls=[ToolCallSpec("lookup", {"key": "nuts"})]),  # no text with this call
        Reply(text="7 of each."),
    ]
    with FakeLLMServer(replies=replies) as srv:
        agent = Agent("stock", adapter(srv), tools=[lookup])
        await Runner(workspace=str(tmp_path / "ws")).run(agent, "c1", "bolts and nuts?")
    folder = tmp_path / "ws/sessions/c1/op_snapshots"
    first = json.loads((folder / "step_001_lookup.json").read_text())
    second = json.loads((folder / "step_002_lookup.json").read_text())
    for snap in (first, second):
        assert list(snap) == DBGPT_FIELDS  # every key present, in DB-GPT's order
        assert snap["action_intention"] is None and snap["action_reason"] is None
        assert _is_utc_iso(snap["timestamp"])
        assert snap["conv_id"] == "c1" and snap["phase"] == "tool" and snap["action"] == "lookup"
    assert first["thought"] == "Bolts first: I will look them up."
    assert second["thought"] is None  # the model said nothing: null, not absent
    assert (first["step"], first["observation"]) == (1, "bolts: 7 units in bin 5")
    assert json.loads(first["action_input"]) == {"key": "bolts"}


async def test_session_snapshot_takes_a_typed_record_and_the_old_mapping_form(tmp_path: Path) -> None:
    cm = ContextManager(ModelSpec("m", 8000), workspace=tmp_path / "ws", tokenizer="heuristic")
    async with cm.session("c") as s:
        typed = await s.snapshot(
            ActionSnapshot("sql_query", action_intention="count orders", action_reason="the user asked"),
            summary="3 rows",
        )
        legacy = await s.snapshot("code", {"observation": "ok", "rows": 3}, summary="ok")
        steps = [(p.step, p.action, p.reference) for p in s.state.progress]
    a = json.loads((tmp_path / "ws" / typed).read_text())
    b = json.loads((tmp_path / "ws" / legacy).read_text())
    assert (a["action_intention"], a["action_reason"], a["thought"]) == (
        "count orders",
        "the user asked",
        None,
    )
    assert list(b) == [*DBGPT_FIELDS, "rows"]  # the caller's own key comes after DB-GPT's
    assert (b["action"], b["observation"], b["phase"], b["rows"]) == ("code", "ok", None, 3)
    assert steps == [(1, "sql_query", typed), (2, "code", legacy)]


# Point 8: AgentScope's two-method Offloader is enough.


class SyncOffloader:
    """A user's offloader with only AgentScope's two methods, synchronous, keeping everything in memory."""

    def __init__(self) -> None:
        self.contexts: list[tuple[str, list[Message]]] = []
        self.results: dict[str, Message] = {}

    def offload_context(self, session_id: str, msgs: Sequence[Message]) -> str:
        self.contexts.append((session_id, list(msgs)))
        return f"mem://{session_id}/context/{len(self.contexts)}"

    def offload_tool_result(self, session_id: str, tool_result: Message) -> str:
        ref = f"mem://{session_id}/result/{tool_result.tool_call_id}"
        self.results[ref] = tool_result
        return ref


class AsyncOffloader(SyncOffloader):
    """The same, with async methods (as AgentScope's S3 example)."""

    async def offload_context(self, session_id: str, msgs: Sequence[Message]) -> str:  # type: ignore[override]
        return SyncOffloader.offload_context(self, session_id, msgs)

    async def offload_tool_result(self, session_id: str, tool_result: Message) -> str:  # type: ignore[override]
        return SyncOffloader.offload_tool_result(self, session_id, tool_result)


@pytest.fixture(params=[SyncOffloader, AsyncOffloader], ids=["sync", "async"])
def offloader(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> SyncOffloader:
    monkeypatch.setenv("CONTEXTKEEP_HOME", str(tmp_path / "home"))  # where the default workspace goes
    made: SyncOffloader = request.param()
    return made


def _manager(offloader: SyncOffloader, window: int, **config: Any) -> ContextManager:
    return ContextManager(
        ModelSpec("test-model", window),
        config=ContextConfig(**config),
        workspace=offloader,
        tokenizer="heuristic",
    )


def _tool_round(call_id: str, text: str) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "cat", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": text},
    ]


async def test_a_long_tool_result_is_cut_at_ingest_and_points_at_the_users_reference(
    offloader: SyncOffloader,
) -> None:
    cm = _manager(offloader, 100_000, tool_result_limit=60, tool_result_limit_max_ratio=None)
    full = "HEAD " + "x" * 3000 + " TAIL"
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *_tool_round("call_1", full)])
        view = await s.prepare()
    shown = view.neutral[-1].text
    assert "<<<TRUNCATED>>>" in shown and shown.startswith("HEAD") and len(shown) < len(full)
    assert [ref for pair in REFERENCE.findall(shown) for ref in pair if ref] == ["mem://c/result/call_1"]
    given = offloader.results["mem://c/result/call_1"]
    assert (given.role, given.tool_call_id, given.text) == ("tool", "call_1", full)
    # The agent can read it back through the recall tool, by the reference it was shown.
    recall = recall_tool(cm.workspace, "c")
    assert await recall.call(json.dumps({"reference": "mem://c/result/call_1", "limit": 10_000})) == full


async def test_dropped_rounds_go_to_offload_context_and_the_session_keeps_working(
    offloader: SyncOffloader,
) -> None:
    cm = _manager(offloader, 3000, layers=("L2",), min_keep_tokens=0, min_keep_recent_rounds=2)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(20)])
        view = await s.prepare()
        cursor = s.state.drop_cursor
        assert view.compacted and cursor > 2
        (session_id, given), *_ = offloader.contexts
        assert session_id == "c"
        assert [m.id for m in given] == [m.id for m in s.transcript[2:cursor]]  # after system + task
        assert [m.text for m in given] == [m.text for m in s.transcript[2:cursor]]
        # The dropped span is still readable by the reference the view shows.
        lines = (await cm.workspace.read(s.state.drop_reference)).splitlines()
        assert [json.loads(line)["id"] for line in lines] == [m.id for m in s.transcript[2:cursor]]
        await s.add(rounds(6, start=20))
        later = await s.prepare()
    split_rounds(later.neutral)  # well paired
    assert later.neutral[0].text == SYSTEM["content"] and later.neutral[1].text == TASK["content"]
    assert later.neutral[-1].text == s.transcript[-1].text
    effective = s.budget().effective
    assert effective is not None and later.tokens <= effective


async def test_the_users_references_read_back_after_a_restart(offloader: SyncOffloader) -> None:
    config = {"tool_result_limit": 60, "tool_result_limit_max_ratio": None}
    full = "".join(f"shard-{i} {'FAILED' if i == 173 else 'ok'}\n" for i in range(400))
    async with _manager(offloader, 100_000, **config).session("c") as s:
        await s.add([SYSTEM, TASK, *_tool_round("call_9", full)])
    fresh = _manager(offloader, 100_000, **config)  # a new process: same default workspace
    recall = recall_tool(fresh.workspace, "c")
    page = await recall.call(json.dumps({"reference": "mem://c/result/call_9", "pattern": "FAILED"}))
    assert page == "174: shard-173 FAILED"
    with pytest.raises(ToolError, match="not a reference of this conversation"):  # confined to its own
        await recall_tool(fresh.workspace, "other").call(json.dumps({"reference": "mem://c/result/call_9"}))


class ReadingOffloader(SyncOffloader):
    """Also reads its references back and keeps snapshots (the optional sub-protocols)."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshots: dict[str, dict[str, Any]] = {}

    def read(self, reference: str) -> str:
        return self.results[reference].text

    async def offload_snapshot(self, session_id: str, snapshot: dict[str, Any]) -> str:
        ref = f"mem://{session_id}/snap/{snapshot['step']}"
        self.snapshots[ref] = dict(snapshot)
        return ref


async def test_an_offloader_that_reads_and_snapshots_is_used_for_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXTKEEP_HOME", str(tmp_path / "home"))
    user = ReadingOffloader()
    cm = _manager(user, 100_000, tool_result_limit=60, tool_result_limit_max_ratio=None)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *_tool_round("call_1", "y" * 2000)])
        ref = await s.snapshot(ActionSnapshot("cat", observation="y" * 2000), summary="ys")
        progress = s.state.progress
    assert ref == "mem://c/snap/1" and progress[0].reference == ref
    assert list(user.snapshots[ref]) == DBGPT_FIELDS
    user.results["mem://c/result/call_1"] = Message("tool", "kept by the user", tool_call_id="call_1")
    assert await cm.workspace.read("mem://c/result/call_1") == "kept by the user"  # read by the user
    assert not (tmp_path / "home/workspace/sessions/c/tool_result-call_1.txt").exists()  # no copy


async def test_an_object_that_is_no_offloader_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="workspace"):
        ContextManager(ModelSpec("m", 8000), workspace=object())  # type: ignore[arg-type]


# Point 11: task progress from the first call, as an option.


async def test_progress_in_prompt_always_shows_the_first_step_before_any_compaction(tmp_path: Path) -> None:
    systems = {}
    for mode in ("on_compaction", "always"):
        replies = [Reply(tool_calls=[ToolCallSpec("lookup", {"key": "bolts"})]), Reply(text="7.")]
        with FakeLLMServer(replies=replies) as srv:
            config = ContextConfig(progress_in_prompt=mode)
            agent = Agent(
                "stock", adapter(srv), system_prompt="You count stock.", tools=[lookup], config=config
            )
            await Runner(workspace=str(tmp_path / mode)).run(agent, "c", "bolts?")
        systems[mode] = [r.body["messages"][0]["content"] for r in srv.requests]
    assert systems["on_compaction"] == ["You count stock.", "You count stock."]  # the cached prefix holds
    assert systems["always"][0] == "You count stock."
    assert "## Task progress" in systems["always"][1]
    assert "step 1 lookup: bolts: 7 units in bin 5" in systems["always"][1]
    assert "sessions/c/op_snapshots/step_001_lookup.json" in systems["always"][1]


def test_progress_in_prompt_is_read_from_toml_and_environment(tmp_path: Path) -> None:
    toml = tmp_path / "contextkeep.toml"
    toml.write_text('[context]\nprogress_in_prompt = "always"\n')
    assert load_config(toml, environ={}).progress_in_prompt == "always"
    env = {"CONTEXTKEEP_PROGRESS_IN_PROMPT": "on_compaction"}
    assert load_config(toml, environ=env).progress_in_prompt == "on_compaction"
    with pytest.raises(ConfigError, match="progress_in_prompt"):
        load_config(toml, environ={"CONTEXTKEEP_PROGRESS_IN_PROMPT": "sometimes"})
