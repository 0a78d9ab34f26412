"""Which messages of a whole history are new: the rule `Session.sync` and the proxy append by.

A framework (or an HTTP client) hands over its whole history before every model call.
The transcript holds what earlier calls added plus every reply recorded since.
Messages are compared by a fingerprint of what the model sees of them (role, text,
tool-call ids and names, the result's call id), so ids, metadata and reasoning a
framework drops or adds do not matter.

1. The transcript is a prefix of the history: the rest of the history is new.
2. Otherwise the history changed older messages itself (trimmed them, rewrote the
   system prompt): if the latest recorded assistant reply, with the results recorded
   after it, is in the history, what follows its last occurrence is new (an earlier reply
   that reads the same, in a history that still follows the transcript up to it, does not
   count: that history stops before the latest reply). The transcript keeps the original
   messages; the edits are not applied (the transcript is append-only).
3. Otherwise the history does not continue this transcript (edited, forked, or a
   retry of a reply that was never delivered): :func:`new_messages` returns ``None``
   and :func:`first_divergence` names the first message that differs.

Tool calls without ids (Google ADK sends ``None``) get ids derived from their position
and content, and results without a call id take the id of the call they answer, so
the same history always maps to the same ids, in every process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import compress, count
from operator import attrgetter, eq, is_not
from typing import Any

from contextkeep._messages import Message, ToolCall

__all__ = [
    "StableIds",
    "common_prefix",
    "fingerprint",
    "first_divergence",
    "fork_id",
    "new_messages",
    "with_stable_ids",
]

Fingerprint = tuple[str, str, tuple[tuple[str, str], ...], str | None]


def fingerprint(m: Message) -> Fingerprint:
    """What identifies a message across calls."""
    return (m.role, m.text.strip(), tuple((c.id, c.name) for c in m.tool_calls), m.tool_call_id)


_KEY = attrgetter("key")


def new_messages(stored: Sequence[Message], incoming: Sequence[Message]) -> list[Message] | None:
    """The messages of `incoming` to append after `stored`; `None` when it does not continue it."""
    n = len(stored)
    # The common case, checked in C (map and eq, no Python frame per message): every stored
    # message comes back with the same content.
    if len(incoming) >= n and all(map(eq, map(_KEY, stored), map(_KEY, incoming))):
        return list(incoming[n:])
    known = [fingerprint(m) for m in stored]
    seen = [fingerprint(m) for m in incoming]
    if seen[: len(known)] == known:
        return list(incoming[len(known) :])
    # The transcript's tail from its latest reply on (the reply and the results recorded after it).
    last_reply = next((i for i in range(len(known) - 1, -1, -1) if known[i][0] == "assistant"), None)
    if last_reply is None:
        return None
    tail = known[last_reply:]
    for i in range(len(seen) - len(tail), -1, -1):
        # An earlier reply that reads the same, where the history still follows the transcript, is
        # not the latest one: the history stops before it (a retry or a branch).
        if seen[i : i + len(tail)] == tail and not _earlier_twin(known, seen, i, last_reply):
            return list(incoming[i + len(tail) :])
    return None


def _earlier_twin(known: list[Fingerprint], seen: list[Fingerprint], at: int, last_reply: int) -> bool:
    """Whether `seen[at:]` starts with an older transcript message like the latest reply, in its own place."""
    end = at + len(known) - last_reply
    return at < last_reply and known[at:end] == seen[at:end] and seen[:at] == known[:at]


def first_divergence(stored: Sequence[Message], incoming: Sequence[Message]) -> int:
    """Index of the first message of `incoming` that differs from `stored` (or is missing from it)."""
    for i, (a, b) in enumerate(zip(stored, incoming, strict=False)):
        if fingerprint(a) != fingerprint(b):
            return i
    return min(len(stored), len(incoming))


def fork_id(conversation_id: str, incoming: Sequence[Message], divergence: int) -> str:
    """The id of the transcript a diverging history forks into.

    Derived from the history up to and including its first differing message, so a
    restarted process, handed the same history (or a longer one), forks into the same one.
    """
    digest = hashlib.sha256()
    for m in incoming[: divergence + 1]:
        digest.update(repr(fingerprint(m)).encode("utf-8", "surrogatepass"))
    return f"{conversation_id}~fork-{digest.hexdigest()[:12]}"


def with_stable_ids(
    history: Iterable[Message | Mapping[str, Any]], *, start: int = 0
) -> list[Message | Mapping[str, Any]]:
    """The history with an id on every tool call and a call id on every tool result.

    `start` is the position of `history`'s first message in the whole history (ids derive
    from positions), for a caller that fixes only the tail of a history it has seen before:
    the tail must then begin at or before the latest message with calls.
    """
    out: list[Message | Mapping[str, Any]] = []
    pending: list[tuple[str, str]] = []  # (call id, function name) of the latest calls without a result
    for index, item in enumerate(history, start):
        if isinstance(item, Message):
            fixed: Message | Mapping[str, Any] = _message_ids(item, index, pending)
        else:
            fixed = _dict_ids(item, index, pending)
        out.append(fixed)
    return out


def common_prefix(
    old: Sequence[object], new: Sequence[object], differ: Callable[[Any, Any], bool] = is_not
) -> int:
    """How many leading items of `new` are the very objects at the same places in `old`.

    `differ` tells two items apart (`operator.ne` compares values instead).
    """
    return next(compress(count(), map(differ, old, new)), min(len(old), len(new)))


class StableIds:
    """:func:`with_stable_ids` for a history handed over again and again, a little longer each time.

    The leading items that are the very objects of the previous history keep their fixed
    form; the walk restarts at the latest of them with tool calls (what a result without an
    id answers depends on nothing before it), so a call costs the new tail, not the history.
    """

    def __init__(self) -> None:
        self._given: list[Message | Mapping[str, Any]] = []
        self._fixed: list[Message | Mapping[str, Any]] = []

    def __call__(self, history: Iterable[Message | Mapping[str, Any]]) -> list[Message | Mapping[str, Any]]:
        """The history with stable ids (the same as `with_stable_ids(history)`)."""
        given = list(history)
        start = _restart(given, common_prefix(self._given, given))
        fixed = self._fixed[:start] + with_stable_ids(given[start:], start=start)
        self._given, self._fixed = given, fixed
        return fixed


def _restart(history: Sequence[Message | Mapping[str, Any]], known: int) -> int:
    """The latest position before `known` whose item has tool calls (0 if none)."""
    for i in range(known - 1, -1, -1):
        item = history[i]
        if item.tool_calls if isinstance(item, Message) else item.get("tool_calls"):
            return i
    return 0


def _derived_id(index: int, position: int, name: str, arguments: str) -> str:
    digest = hashlib.sha256(f"{index}:{position}:{name}:{arguments}".encode("utf-8", "surrogatepass"))
    return f"call_ck{digest.hexdigest()[:16]}"


def _answered(pending: list[tuple[str, str]], name: str | None) -> str | None:
    """The id a result without one answers: the oldest open call of its function (or the oldest)."""
    for i, (call_id, call_name) in enumerate(pending):
        if name is None or call_name == name:
            del pending[i]
            return call_id
    return None


def _message_ids(m: Message, index: int, pending: list[tuple[str, str]]) -> Message:
    if m.role == "tool":
        if m.tool_call_id:
            if pending:
                pending[:] = [p for p in pending if p[0] != m.tool_call_id]
            return m
        call_id = _answered(pending, m.name)
        return m if call_id is None else replace(m, tool_call_id=call_id)
    if not m.tool_calls:
        return m
    if all(c.id for c in m.tool_calls):  # the usual case (every sync walks the whole history)
        pending[:] = [(c.id, c.name) for c in m.tool_calls]
        return m
    calls = tuple(
        c if c.id else ToolCall(_derived_id(index, j, c.name, c.arguments), c.name, c.arguments, c.extra)
        for j, c in enumerate(m.tool_calls)
    )
    pending[:] = [(c.id, c.name) for c in calls]
    return replace(m, tool_calls=calls)


def _dict_ids(d: Mapping[str, Any], index: int, pending: list[tuple[str, str]]) -> Mapping[str, Any]:
    if d.get("role") == "tool":
        if isinstance(d.get("tool_call_id"), str) and d["tool_call_id"]:
            pending[:] = [p for p in pending if p[0] != d["tool_call_id"]]
            return d
        call_id = _answered(pending, d.get("name"))
        return d if call_id is None else {**d, "tool_call_id": call_id}
    calls = d.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return d
    fixed = [_dict_call(c, index, j) for j, c in enumerate(calls)]
    pending[:] = [(c["id"], _function(c).get("name", "")) for c in fixed if isinstance(c, Mapping)]
    return d if fixed == calls else {**d, "tool_calls": fixed}


def _function(c: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = c.get("function")
    return fn if isinstance(fn, Mapping) else {}


def _dict_call(c: Any, index: int, position: int) -> Any:
    if not isinstance(c, Mapping) or (isinstance(c.get("id"), str) and c["id"]):
        return c
    fn = _function(c)
    arguments = fn.get("arguments", "")
    name = str(fn.get("name", ""))
    return {**c, "id": _derived_id(index, position, name, arguments if isinstance(arguments, str) else "")}
