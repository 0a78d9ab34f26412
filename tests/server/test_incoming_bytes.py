"""A client's re-sent history recognised by its bytes converts exactly as the whole history would."""

from __future__ import annotations

import json
import random
from typing import Any

from contextkeep._formats.openai import from_openai
from contextkeep.server._incoming import ClientMemory

TRICKY = '"]}, {"messages": ['
"""Quotes and brackets inside a string."""


def _body(messages: list[dict[str, Any]], step: int) -> bytes:
    """Bodies laid out as clients do: messages first or last, compact or spaced."""
    fields = {"messages": messages, "model": "m"} if step % 2 else {"model": "m", "messages": messages}
    return json.dumps(fields, separators=(",", ":") if step % 3 == 0 else None).encode()


def test_appends_edits_and_retries_convert_as_the_whole_history():
    rng = random.Random(7)
    memory = ClientMemory("c")
    history: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for step in range(300):
        roll = rng.random()
        if roll < 0.7 or len(history) < 2:
            history = [*history, {"role": "user", "content": f"u{step} " + TRICKY}]
        elif roll < 0.85:  # a retry of an earlier request
            history = history[:-1]
        else:  # an edit, the same length in bytes
            i = rng.randrange(len(history))
            history = [
                *history[:i],
                {**history[i], "content": history[i]["content"][::-1]},
                *history[i + 1 :],
            ]
        raw = _body(history, step)
        parsed = json.loads(raw)["messages"]
        assert [m.key for m in memory.convert(parsed, raw)] == [m.key for m in from_openai(parsed)]


def test_a_second_messages_key_is_not_taken_for_the_first():
    memory = ClientMemory("c")
    first = [{"role": "user", "content": "a"}]
    memory.convert(first, json.dumps({"messages": first}).encode())
    later = [{"role": "user", "content": "b"}]
    raw = b'{"messages": [{"role": "user", "content": "a"}], "messages": ' + json.dumps(later).encode() + b"}"
    assert [m.text for m in memory.convert(json.loads(raw)["messages"], raw)] == ["b"]
