"""`view.messages` and `view.anthropic()` are converted incrementally, and equal a fresh conversion."""

from __future__ import annotations

import json
from typing import Any

from contextkeep._formats import to_anthropic, to_openai
from contextkeep._messages import Message
from contextkeep._view import View
from contextkeep.replay.trajectories import load_trajectories
from support import call, manager, require_shared, result, rounds


def _bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=False).encode()


def _assert_fresh(view: View) -> None:
    assert _bytes(view.messages) == _bytes(to_openai(view.neutral))
    assert _bytes(view.anthropic()) == _bytes(to_anthropic(view.neutral))


async def test_replay_with_compactions_converts_only_what_changed_and_equals_a_fresh_conversion(tmp_path):
    (trajectory,) = load_trajectories(
        require_shared("trajectories", "mini-swe-agent", "django__django-14997.traj.json")
    )
    cm = manager(tmp_path, window=16_000, trigger_ratio=0.8)
    layers: set[str] = set()
    async with cm.session("replay") as s:
        added, previous = 0, None
        for recorded in trajectory.calls:
            await s.add(trajectory.messages[added : recorded.index])
            view = await s.prepare(tools=trajectory.tools)
            _assert_fresh(view)
            layers.update(view.compacted)
            if previous is not None and not view.compacted:
                # Nothing compacted: the previous view is a prefix, its dicts are reused as they are.
                shared = len(previous.neutral)
                assert view.neutral[:shared] == previous.neutral
                assert all(a is b for a, b in zip(view.messages, previous.messages, strict=False))
                assert view.conversions.openai.converted == len(view.neutral) - shared
            # Only the last view is kept: messages that left the view are forgotten.
            assert len(view.conversions.openai) == len(view.neutral)
            assert len(view.conversions.anthropic) == len(view.neutral)
            await s.record(trajectory.messages[recorded.index])
            added, previous = recorded.index + 1, view
    assert {"L1", "L2", "L3"} <= layers  # masking, dropping and summaries all changed the view
    assert len(s.transcript) > 2 * len(view.neutral)


async def test_a_view_converted_after_a_newer_one_is_still_its_own(tmp_path):
    cm = manager(tmp_path, window=None)
    async with cm.session("c") as s:
        await s.add([{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}, *rounds(3)])
        older = await s.prepare()
        await s.add(rounds(2, start=3))
        newer = await s.prepare()
        assert len(newer.messages) == 12
        _assert_fresh(older)  # converted second, from the newer view's state
        _assert_fresh(newer)
        assert len(older.messages) == 8
        assert all(a is b for a, b in zip(older.messages, newer.messages, strict=False))


async def test_changing_the_returned_list_does_not_change_the_next_view(tmp_path):
    cm = manager(tmp_path, window=None)
    async with cm.session("c") as s:
        await s.add([{"role": "user", "content": "task"}, *rounds(2)])
        messages = (await s.prepare()).messages
        first = messages[0]
        messages.append({"role": "assistant", "content": "appended by the caller"})
        del messages[0]
        _, blocks = (await s.prepare()).anthropic()
        blocks.clear()
        await s.add(rounds(1, start=2))
        view = await s.prepare()
        _assert_fresh(view)
        assert view.messages[0] is first  # still reused: the caller changed its list, not the dicts


async def test_tool_results_merged_later_leave_the_anthropic_list_handed_out_unchanged(tmp_path):
    cm = manager(tmp_path, window=None)
    async with cm.session("c") as s:
        both = call("a")
        both["tool_calls"] += call("b")["tool_calls"]
        await s.add([{"role": "user", "content": "task"}, both, result("a", "first")])
        # A view with a call still waiting is never prepared; current_view shows the view as it stands.
        _, before = (await s.current_view()).anthropic()
        await s.add([result("b", "second")])
        _, after = (await s.current_view()).anthropic()
        assert [b["tool_use_id"] for b in before[-1]["content"]] == ["a"]
        assert [b["tool_use_id"] for b in after[-1]["content"]] == ["a", "b"]
        assert after[:-1] == before[:-1] and after[0] is before[0]


async def test_a_view_list_changed_in_place_is_converted_and_counted_as_it_now_is(tmp_path):
    # The builder vouches that a view extends the last one; an edit in place voids that promise.
    cm = manager(tmp_path, window=None)
    async with cm.session("c") as s:
        await s.add([{"role": "user", "content": "task"}, *rounds(3)])
        _assert_fresh(await s.prepare())
        await s.add(rounds(1, start=3))
        view = await s.prepare()
        view.neutral[2] = Message("tool", "edited by the caller " * 20, tool_call_id="c0")
        _assert_fresh(view)
        assert view.messages[2]["content"].startswith("edited by the caller")
        assert s.counter.count_prompt(view.neutral) == cm.new_counter().count_prompt(list(view.neutral))


async def test_a_call_extends_the_last_view_in_place_and_older_views_keep_their_own(tmp_path):
    cm = manager(tmp_path, window=None)
    async with cm.session("c") as s:
        await s.add([{"role": "user", "content": "task"}, *rounds(2)])
        older = await s.prepare()
        await s.add(rounds(1, start=2))
        newer = await s.prepare()
        # No copy of the history per call: the newer view's list is the older one's, extended.
        assert newer.built is older.built
        assert len(older.neutral) == 5 and len(newer.neutral) == 7
        assert newer.neutral[:5] == older.neutral
        _assert_fresh(older)  # converted after the newer view grew the list they share
        _assert_fresh(newer)
        newer.neutral.clear()  # each view's `neutral` is a list of its own
        await s.add(rounds(1, start=3))
        latest = await s.prepare()
        assert len(latest.neutral) == 9 and len(older.neutral) == 5
        _assert_fresh(latest)
