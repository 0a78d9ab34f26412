"""Stable tool-call ids over a history handed over again and again (`Session.sync`'s input)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from contextkeep._continuation import StableIds, with_stable_ids
from contextkeep._messages import Message, ToolCall


def _round(i: int, rng: random.Random) -> list[Message | Mapping[str, Any]]:
    """An assistant with one or two calls (some without ids) and their results (some without ids)."""
    calls = [
        ToolCall(f"c{i}-{j}" if rng.random() < 0.5 else "", "bash", f'{{"n": {i}}}') for j in range(1 + i % 2)
    ]
    out: list[Message | Mapping[str, Any]] = [Message("assistant", f"step {i}", tool_calls=tuple(calls))]
    for c in calls:
        result = {"role": "tool", "content": f"out {i}"} if rng.random() < 0.5 else None
        out.append(result or Message("tool", f"out {i}", tool_call_id=c.id or None, name="bash"))
    return out


def test_a_growing_history_gets_the_ids_a_whole_walk_gives() -> None:
    rng = random.Random(7)
    history: list[Message | Mapping[str, Any]] = [Message("user", "task")]
    ids = StableIds()
    for i in range(60):
        history = history + _round(i, rng)  # a new list each call, the old items the same objects
        if i % 17 == 16:  # now and then the framework hands over an edited copy of an old message
            history[3] = Message("assistant", "edited", tool_calls=(ToolCall("", "bash", "{}"),))
        assert ids(history) == with_stable_ids(history)


def test_the_unchanged_prefix_is_not_walked_again() -> None:
    rng = random.Random(3)
    history: list[Message | Mapping[str, Any]] = [Message("user", "task")]
    for i in range(50):
        history += _round(i, rng)
    ids = StableIds()
    first = ids(history)
    longer = [*history, *_round(50, rng)]
    again = ids(longer)
    # The fixed form of every message before the latest calls is the very object handed out before.
    assert all(a is b for a, b in zip(first[:-3], again, strict=False))
