"""Request bodies as a client re-sends them, call after call: for the proxy's byte-level reading."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

__all__ = ["TRICKY", "body", "resent_bodies"]

TRICKY = '"]}, {"messages": [ \\u00e9 é ,'
"""Quotes, brackets, commas and escapes inside a string."""


def body(messages: list[dict[str, Any]], step: int) -> bytes:
    """Bodies laid out as clients do: messages first or last, compact, spaced or indented."""
    first = {"messages": messages, "model": "m", "temperature": step / 10}
    last = {"model": "m", "tools": [{"type": "function", "function": {"name": "f"}}], "messages": messages}
    fields = first if step % 2 else last
    if step % 4 == 3:
        return json.dumps(fields, indent=2).encode()
    return json.dumps(fields, separators=(",", ":") if step % 3 == 0 else None).encode()


def _edited(history: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """One message changed: half the time to text of the same length in bytes (reversed)."""
    i = rng.randrange(len(history))
    text = history[i]["content"]
    changed = text[::-1] if rng.random() < 0.5 and text != text[::-1] else "edited"
    return [*history[:i], {**history[i], "content": changed}, *history[i + 1 :]]


def resent_bodies(seed: int, steps: int = 300) -> Iterator[bytes]:
    """A client's bodies, one per call: mostly appends of 1–3 messages, some retries of an earlier
    request (the last message gone), some edits of an earlier message."""
    rng = random.Random(seed)
    history: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for step in range(steps):
        roll = rng.random()
        if roll < 0.7 or len(history) < 2:
            new = [{"role": "user", "content": f"u{step} {TRICKY}", "name": "x"}] * rng.randint(1, 3)
            history = [*history, *new]
        elif roll < 0.85:
            history = history[:-1]
        else:
            history = _edited(history, rng)
        yield body(history, step)
