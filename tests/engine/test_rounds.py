"""Rounds, turns, malformed histories and repair policies."""

from __future__ import annotations

import pytest

from contextkeep._errors import MalformedHistoryError
from contextkeep._formats import from_openai
from contextkeep._messages import Message, ToolCall
from contextkeep._rounds import (
    Repair,
    RepairPolicy,
    RoundTracker,
    current_turn_start,
    repair_history,
    split_rounds,
)
from contextkeep.replay.trajectories import load_trajectories
from support import mini_swe_agent_files, require_shared


def call(*ids: str) -> Message:
    return Message("assistant", "thinking", tool_calls=tuple(ToolCall(i, "bash", "{}") for i in ids))


def result(call_id: str) -> Message:
    return Message("tool", f"output of {call_id}", tool_call_id=call_id)


SYSTEM = Message("system", "sys")
USER = Message("user", "task")


def spans(messages: list[Message]) -> list[tuple[str, int, int, int]]:
    return [(r.kind, r.start, r.end, r.turn) for r in split_rounds(messages)]


def test_parallel_calls_with_results_out_of_order_form_one_round() -> None:
    history = [
        SYSTEM,
        Message("system", "more rules"),
        USER,
        call("a", "b", "c"),
        result("c"),
        result("a"),
        result("b"),
        Message("assistant", "done"),
        Message("user", "next"),
    ]
    assert spans(history) == [
        ("system", 0, 2, 0),
        ("user", 2, 3, 1),
        ("assistant", 3, 7, 1),
        ("assistant", 7, 8, 1),
        ("user", 8, 9, 2),
    ]


def test_late_system_message_is_its_own_round() -> None:
    assert spans([USER, Message("system", "note"), call("a"), result("a")]) == [
        ("user", 0, 1, 1),
        ("system", 1, 2, 1),
        ("assistant", 2, 4, 1),
    ]


def test_pending_tail_is_allowed_until_a_call_needs_it() -> None:
    tracker = RoundTracker()
    tracker.extend([SYSTEM, USER, call("a", "b"), result("a")])
    assert tracker.rounds[-1].pending == {"b"}
    with pytest.raises(MalformedHistoryError) as info:
        tracker.require_complete()
    assert (info.value.kind, info.value.index, info.value.message_id) == ("missing_result", 2, "b")
    tracker.append(result("b"))
    tracker.require_complete()


@pytest.mark.parametrize(
    ("history", "kind", "index", "offender"),
    [
        ([USER, result("x")], "orphan_result", 1, "x"),
        ([USER, call("a"), result("a"), result("a")], "duplicate_id", 3, "a"),
        ([USER, call("a", "a")], "duplicate_id", 1, "a"),
        ([USER, call("a"), Message("user", "hurry")], "missing_result", 1, "a"),
        ([USER, call("a", "b"), result("a"), Message("assistant", "x")], "missing_result", 1, "b"),
        ([Message("user", "x", id="m1"), Message("user", "y", id="m1")], "duplicate_id", 1, "m1"),
    ],
    ids=[
        "orphan",
        "duplicate-result",
        "same-id-twice-in-one-message",
        "missing-before-user",
        "missing-before-assistant",
        "duplicate-message-id",
    ],
)
def test_malformed_history_names_the_offending_message(
    history: list[Message], kind: str, index: int, offender: str
) -> None:
    with pytest.raises(MalformedHistoryError) as info:
        split_rounds(history)
    assert (info.value.kind, info.value.index, info.value.message_id) == (kind, index, offender)
    with pytest.raises(MalformedHistoryError):
        repair_history(history, RepairPolicy.RAISE)


def test_call_ids_may_recur_in_later_rounds_as_real_providers_do() -> None:
    history = [USER, call("a"), result("a"), call("a"), result("a")]
    assert spans(history) == [("user", 0, 1, 1), ("assistant", 1, 3, 1), ("assistant", 3, 5, 1)]


def test_a_failed_append_changes_nothing() -> None:
    tracker = RoundTracker()
    tracker.extend([USER, call("a")])
    before = [(r.start, r.end, set(r.pending)) for r in tracker.rounds]
    with pytest.raises(MalformedHistoryError):
        tracker.append(result("zzz"))
    assert [(r.start, r.end, set(r.pending)) for r in tracker.rounds] == before
    assert len(tracker) == 2


def test_drop_orphans_policy_drops_and_reports() -> None:
    history = [USER, result("x"), call("a"), result("a"), result("a")]
    fixed, repairs = repair_history(history, RepairPolicy.DROP_ORPHANS)
    assert fixed == [USER, call("a"), result("a")]
    assert repairs == [Repair("orphan_result", 1, "x", "dropped"), Repair("duplicate_id", 4, "a", "dropped")]
    with pytest.raises(MalformedHistoryError, match="missing_result"):
        repair_history([USER, call("a"), USER], RepairPolicy.DROP_ORPHANS)


def test_synthesize_policy_fills_missing_results() -> None:
    fixed, repairs = repair_history(
        [USER, call("a", "b"), result("b"), Message("user", "go on")], RepairPolicy.SYNTHESIZE
    )
    assert [m.role for m in fixed] == ["user", "assistant", "tool", "tool", "user"]
    assert fixed[3].tool_call_id == "a" and "no result was recorded" in fixed[3].text
    assert fixed[3].metadata["ck_kind"] == "synthetic"
    assert repairs == [Repair("missing_result", 3, "a", "synthesized")]
    split_rounds(fixed)
    tail, more = repair_history([USER, call("z")], RepairPolicy.SYNTHESIZE, allow_pending_tail=False)
    assert tail[-1].tool_call_id == "z" and more[0].action == "synthesized"


@pytest.mark.parametrize("path", mini_swe_agent_files() or [None], ids=lambda p: p.name if p else "none")
def test_shared_trajectories_split_into_complete_rounds(path) -> None:
    path = path or require_shared("trajectories", "mini-swe-agent")
    (trajectory,) = load_trajectories(path)
    rounds = split_rounds(trajectory.messages)
    assert rounds[0].kind == "system"
    assert sum(len(r) for r in rounds) == len(trajectory.messages)
    for r in rounds:
        members = trajectory.messages[r.start : r.end]
        calls = {c.id for m in members for c in m.tool_calls}
        results = {m.tool_call_id for m in members if m.role == "tool"}
        assert calls - r.pending == results
    # The recording ends on the submit call, whose result was never fed back.
    assert all(r.complete for r in rounds[:-1])


def test_current_turn_start_finds_the_user_message_that_opened_each_turn() -> None:
    history = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "a"},
        {"role": "system", "content": "a note between turns"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "c"},
    ]
    rounds = split_rounds(from_openai(history))
    assert [current_turn_start(rounds, earlier) for earlier in (0, 1, 2, 5)] == [6, 4, 1, 1]
    assert current_turn_start(split_rounds(from_openai(history[:1]))) is None
