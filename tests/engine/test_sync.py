"""`Session.sync`: a framework's whole history in, only what is new appended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import HistoryDivergedError
from contextkeep._manager import ContextManager
from support import call, manager, result

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Find why build 4411 fails"}


def texts(messages: Any) -> list[str]:
    return [m.text for m in messages]


def without_ids() -> list[dict[str, Any]]:
    """A Google ADK-shaped history: function calls and responses carry no ids."""
    return [
        SYSTEM,
        TASK,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": None, "type": "function", "function": {"name": "read", "arguments": '{"p": "a.py"}'}},
                {"id": None, "type": "function", "function": {"name": "grep", "arguments": '{"q": "4411"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": None, "name": "grep", "content": "line 7: 4411"},
        {"role": "tool", "tool_call_id": None, "name": "read", "content": "def build(): ..."},
    ]


async def test_sync_appends_only_what_is_new(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    history = [SYSTEM, TASK, call("c1", "ls"), result("c1", "a.py b.py")]
    async with cm.session("c") as s:
        assert len(await s.sync(history[:2])) == 2
        added = await s.sync(history)
        assert texts(added) == ["running ls", "a.py b.py"]
        assert await s.sync(history) == []  # the same history again: nothing new
        assert texts(s.transcript) == [str(m["content"]) for m in history]


async def test_a_history_that_drops_older_messages_continues_after_the_last_reply(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    async with cm.session("c") as s:
        await s.sync([SYSTEM, TASK, call("c1", "ls"), result("c1", "a.py")])
        # The framework trimmed its own history; what follows the last reply it still holds is new.
        added = await s.sync([call("c1", "ls"), result("c1", "a.py"), {"role": "user", "content": "next"}])
        assert texts(added) == ["next"]
        assert len(s.transcript) == 5


async def test_calls_without_ids_get_stable_ids_every_process_agrees_on(tmp_path: Path) -> None:
    def open_manager() -> ContextManager:
        return ContextManager(
            ModelSpec("test-model", 8_000),
            config=ContextConfig(),
            store=f"sqlite:///{tmp_path / 'state.db'}",
            workspace=tmp_path / "ws",
            tokenizer="heuristic",
        )

    first = open_manager()
    async with first.session("c") as s:
        await s.sync(without_ids())
        calls = s.transcript[2].tool_calls
        assert all(c.id.startswith("call_ck") for c in calls) and calls[0].id != calls[1].id
        # Each result answers the call of its own function.
        by_id = {c.id: c.name for c in calls}
        assert [by_id[m.tool_call_id or ""] for m in s.transcript[3:]] == ["grep", "read"]
    await first.close()
    again = open_manager()
    async with again.session("c") as s2:
        assert await s2.sync(without_ids()) == []  # a restarted process derives the same ids
        assert [c.id for c in s2.transcript[2].tool_calls] == [c.id for c in calls]
    await again.close()


async def test_an_edited_history_raises_naming_the_first_differing_message(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    async with cm.session("c") as s:
        await s.sync([SYSTEM, TASK])
        edited = [SYSTEM, {"role": "user", "content": "a different task"}]
        with pytest.raises(HistoryDivergedError) as caught:
            await s.sync(edited)
        assert caught.value.index == 1 and "message 1" in str(caught.value)
        assert len(s.transcript) == 2  # nothing stored


async def test_fork_continues_an_edited_history_in_a_transcript_of_its_own(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    edited = [SYSTEM, {"role": "user", "content": "a different task"}]
    async with cm.session("c") as s:
        await s.sync([SYSTEM, TASK])
        await s.sync(edited, fork=True)
        forked = s.conversation_id
        assert forked.startswith("c~fork-") and texts(s.transcript) == texts(await _neutral(edited))
        await s.sync([*edited, call("c1", "ls"), result("c1", "a.py")])
        assert len(s.transcript) == 4
    async with cm.session("c") as original:  # the original transcript is untouched
        assert texts(original.transcript) == [SYSTEM["content"], TASK["content"]]
    async with cm.session("c") as again:  # the same edit forks into the same transcript
        await again.sync([*edited, call("c1", "ls"), result("c1", "a.py")], fork=True)
        assert again.conversation_id == forked and len(again.transcript) == 4


async def test_instructions_outside_the_messages_are_counted_in_the_budget(tmp_path: Path) -> None:
    cm = manager(tmp_path, 4_000)
    instructions = "Always answer in French. " * 40
    async with cm.session("c") as s:
        await s.sync([TASK])
        plain = await s.prepare()
        await s.sync([TASK], instructions=instructions)
        counted = await s.prepare()
    outside = s.counter.count_message((await _neutral([{"role": "system", "content": instructions}]))[0])
    assert plain.status.budget is not None and counted.status.budget == plain.status.budget - outside
    assert counted.status.ratio is not None and plain.status.ratio is not None
    assert counted.status.ratio > plain.status.ratio
    async with cm.session("c") as s:  # other instructions are counted instead, not the ones before
        await s.sync([TASK], instructions=instructions * 2)
        longer = await s.prepare()
        await s.sync([TASK], instructions=instructions)
        assert (await s.prepare()).status.budget == counted.status.budget
    assert longer.status.budget is not None and longer.status.budget < counted.status.budget


async def _neutral(history: list[dict[str, Any]]) -> list[Any]:
    from contextkeep._formats import from_openai

    return from_openai(history)
