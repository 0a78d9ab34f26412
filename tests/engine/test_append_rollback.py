"""A refused append leaves the log exactly as it was, and an append costs what it adds, not the history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contextkeep import ContextManager, MalformedHistoryError, Message, ModelSpec
from contextkeep._formats.openai import from_openai
from contextkeep._session import Session
from contextkeep._transcript import Transcript
from contextkeep.stores.memory import MemoryStore
from support import call, manager, result, rounds


def log_of(s: Session) -> Transcript:
    return s._log


def snapshot(log: Transcript) -> dict[str, Any]:
    """Everything an append may touch: messages, rounds (pending calls too), claimed ids, answered calls."""
    t = log.tracker
    return {
        "messages": list(log.messages),
        "rounds": [(r.index, r.start, r.end, r.kind, r.turn, sorted(r.pending)) for r in t.rounds],
        "count": len(t),
        "call_ids": set(t._call_ids),
        "message_ids": set(t._message_ids),
        "answered": set(log._answered),
    }


def rebuilt(log: Transcript) -> dict[str, Any]:
    """The snapshot of a log built from scratch over the same messages."""
    fresh = Transcript(log.store, log.conversation_id, log._cas)
    fresh.tracker.extend(log.messages)
    fresh._extend(log.messages)
    return snapshot(fresh)


LONG: list[dict[str, Any]] = [
    {"role": "system", "content": "rules"},
    {"role": "user", "content": "the task"},
    *rounds(600, 40),
]

REFUSED: dict[str, list[Message | dict[str, Any]]] = {
    # Each batch starts with messages that are fine, so the trial has appended some before refusing.
    "orphan result after a new round": [call("new-1"), result("new-1", "ok"), result("nobody", "?")],
    "duplicate caller id": [
        Message("user", "a", id="u-1"),
        call("new-2"),
        result("new-2", "b"),
        Message("user", "c", id="u-1"),
    ],
    "id an earlier message has": [
        Message("user", "x", id="u-9"),
        Message("user", "y", id="m000005"),
    ],
    "answering a call twice": [call("new-3"), result("new-3", "one"), result("new-3", "two")],
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
async def test_a_refused_batch_in_a_long_transcript_changes_nothing(tmp_path: Path, case: str) -> None:
    async with manager(tmp_path, None).session("c") as s:
        await s.add(LONG)
        # The newest round waits for one of its two results: the refused batch answers it first.
        await s.add(
            [
                {**call("p-1"), "tool_calls": [*call("p-1")["tool_calls"], *call("p-2")["tool_calls"]]},
                result("p-1", "first"),
            ]
        )
        before = snapshot(log_of(s))
        with pytest.raises(MalformedHistoryError):
            await s.add([result("p-2", "second"), *REFUSED[case]])
        assert snapshot(log_of(s)) == before
        assert before == rebuilt(log_of(s))
        # What the refused batch claimed is free again, and the session goes on where it stood.
        stored = await s.add(
            [
                result("p-2", "second"),
                Message("user", "a", id="u-1"),
                call("new-1"),
                result("new-1", "ok"),
            ]
        )
        assert stored[0].id == f"m{len(before['messages']):06d}"
        assert snapshot(log_of(s)) == rebuilt(log_of(s))


async def test_a_batch_refused_after_losing_a_race_leaves_the_winners_log(tmp_path: Path) -> None:
    """Validated again on top of what another instance appended, and refused there: that log, as loaded."""
    store = MemoryStore()
    model = ModelSpec("test-model", None)
    first = ContextManager(model, store=store, workspace=tmp_path / "a", tokenizer="heuristic")
    second = ContextManager(model, store=store, workspace=tmp_path / "b", tokenizer="heuristic")
    async with first.session("c") as a, second.session("c") as b:
        await a.add([*LONG, call("last")])
        await b.load()
        await a.add([result("last", "answered by a"), {"role": "user", "content": "next"}])
        with pytest.raises(MalformedHistoryError, match="already has a result"):
            await b.add([result("last", "answered by b")])  # loses the race, then is a duplicate
        assert snapshot(log_of(b)) == snapshot(log_of(a)) == rebuilt(log_of(b))
    await first.close()
    await second.close()


async def test_an_append_extends_the_log_in_place(tmp_path: Path) -> None:
    """Nothing of the history is copied: the tracker, its rounds and its id sets stay the same objects."""
    async with manager(tmp_path, None).session("c") as s:
        await s.add(LONG)
        log = log_of(s)
        tracker, rounds_list, old_rounds = log.tracker, log.tracker.rounds, list(log.tracker.rounds)
        call_ids, message_ids = tracker._call_ids, tracker._message_ids
        await s.add([call("more"), result("more", "done")])
        with pytest.raises(MalformedHistoryError):
            await s.add([call("again"), result("stray", "?")])
        assert log.tracker is tracker and tracker.rounds is rounds_list
        assert all(a is b for a, b in zip(old_rounds, tracker.rounds, strict=False))
        assert tracker._call_ids is call_ids and tracker._message_ids is message_ids
        assert len(tracker.rounds) == len(old_rounds) + 1


async def test_the_ingester_is_handed_only_the_batchs_answered_calls(tmp_path: Path) -> None:
    """An offloaded result's name depends on whether its call id was answered before: asked of the batch only."""
    async with manager(tmp_path, None).session("c") as s:
        await s.add(LONG)
        await s.add([call("c3"), result("c3", "a reused call id, answered before (in LONG)")])
        log, seen = log_of(s), []

        async def ingest(m: Message, answered: set[str]) -> Message:
            seen.append((m.tool_call_id, m.tool_call_id in answered, len(answered)))
            answered.add(m.tool_call_id or "")
            return m

        batch = from_openai([call("c3"), result("c3", "again"), call("z"), result("z", "new")])
        await log.append(batch, s.config.repair_policy, ingest)
        tools = [(call_id, was) for call_id, was, _ in seen if call_id]
        assert tools == [("c3", True), ("z", False)]
        assert max(size for _, _, size in seen) <= 2  # not a copy of the 600 answered calls
