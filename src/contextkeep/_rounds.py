"""Rounds and turns: the atomic units compaction works in.

A *round* is one assistant message plus the results of every tool call it made
(results may arrive in any order). A user message, and a system message after the
leading ones, is a round of its own; the leading system messages form the
preamble (round 0, kind `system`), which compaction never touches. A *turn*
starts at each user message.

:class:`RoundTracker` is incremental: appending a message costs O(1), so the
session never re-splits the history. A history that breaks pairing raises
:class:`~contextkeep.MalformedHistoryError` naming the message, unless a
:class:`RepairPolicy` is configured, and every repair is reported.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from contextkeep._errors import MalformedHistoryError
from contextkeep._messages import Message

__all__ = [
    "Repair",
    "RepairPolicy",
    "Round",
    "RoundTracker",
    "append_repaired",
    "current_turn_start",
    "repair_history",
    "split_rounds",
]

RoundKind = Literal["system", "user", "assistant"]
_NO_RESULT = "[contextkeep: no result was recorded for this call]"


@dataclass(slots=True)
class Round:
    """A contiguous span of messages that compaction keeps or removes as a whole."""

    index: int
    """Position among the rounds (0 is the system preamble when there is one)."""
    start: int
    """Index of the round's first message in the transcript."""
    end: int
    """Index one past its last message."""
    kind: RoundKind
    """`system`, `user` or `assistant`."""
    turn: int
    """The turn it belongs to: the number of user messages seen up to and including it."""
    pending: set[str] = field(default_factory=set)
    """Tool call ids still waiting for their result (only the newest round may have any)."""

    @property
    def complete(self) -> bool:
        """Whether every tool call of the round has its result."""
        return not self.pending

    def __len__(self) -> int:
        return self.end - self.start


class RoundTracker:
    """Splits a growing message list into rounds, one message at a time."""

    def __init__(self) -> None:
        self.rounds: list[Round] = []
        self._count = 0
        self._call_ids: set[str] = set()
        self._message_ids: set[str] = set()
        self._turn = 0
        self._claimed: list[tuple[set[str], str]] | None = None
        """Inside `trial`: every id added to `_call_ids` or `_message_ids`, to take out again."""

    def __len__(self) -> int:
        return self._count

    def trial(self) -> _Trial:
        """Appends (and ids claimed) inside are undone on exit, however it exits: O(what they changed).

        Validating a batch in place this way leaves the tracker exactly as it was, without copying
        the history's ids (what a copy of the tracker would cost on every append).
        """
        assert self._claimed is None, "trials do not nest"
        return _Trial(self)

    def unique_id(self, wanted: str) -> str:
        """`wanted`, or the first `wanted.N` no message uses yet (a caller may have taken it); claimed.

        Deterministic in the messages seen, so every instance assigns the same ids.
        """
        mid, n = wanted, 1
        while mid in self._message_ids:
            mid, n = f"{wanted}.{n}", n + 1
        self._claim(self._message_ids, mid)
        return mid

    def _claim(self, ids: set[str], value: str) -> None:
        if value not in ids:
            ids.add(value)
            if self._claimed is not None:
                self._claimed.append((ids, value))

    def check(self, message: Message, index: int | None = None) -> None:
        """Raise `MalformedHistoryError` if `message` cannot be appended; change nothing."""
        self._problem(message, self._count if index is None else index, raise_=True)

    def append(self, message: Message) -> None:
        """Append one message; raises `MalformedHistoryError` (and changes nothing) if it breaks pairing."""
        self._problem(message, self._count, raise_=True)
        self._add(message)

    def extend(self, messages: Iterable[Message]) -> None:
        """Append messages in order."""
        for m in messages:
            self.append(m)

    def extend_accepted(self, messages: Iterable[Message]) -> None:
        """Append messages a `trial` on this very state accepted (they are not checked again)."""
        for m in messages:
            self._add(m)

    def _add(self, message: Message) -> None:
        index = self._count
        if message.id is not None:
            self._claim(self._message_ids, message.id)
        last = self.rounds[-1] if self.rounds else None
        if message.role == "tool":
            assert last is not None and message.tool_call_id is not None
            last.pending.discard(message.tool_call_id)
            last.end = index + 1
        elif message.role == "system" and last is not None and last.kind == "system" and last.index == 0:
            last.end = index + 1
        else:
            if message.role == "user":
                self._turn += 1
            pending = {c.id for c in message.tool_calls}
            for call_id in pending:
                self._claim(self._call_ids, call_id)
            kind: RoundKind = message.role
            self.rounds.append(Round(len(self.rounds), index, index + 1, kind, self._turn, pending))
        self._count += 1

    def require_complete(self) -> None:
        """Raise if the newest round still waits for tool results (a model call would be rejected)."""
        if self.rounds and self.rounds[-1].pending:
            last = self.rounds[-1]
            missing = sorted(last.pending)
            raise MalformedHistoryError(
                "missing_result",
                last.start,
                missing[0],
                f"tool call(s) {missing} have no result yet",
            )

    def _problem(self, m: Message, index: int, *, raise_: bool) -> MalformedHistoryError | None:
        err = self._find_problem(m, index)
        if err is not None and raise_:
            raise err
        return err

    def _find_problem(self, m: Message, index: int) -> MalformedHistoryError | None:
        mid = m.id or m.tool_call_id or ""
        if m.id is not None and m.id in self._message_ids:
            return MalformedHistoryError("duplicate_id", index, m.id, "message id already used")
        last = self.rounds[-1] if self.rounds else None
        if m.role == "tool":
            call = m.tool_call_id or ""
            if last is not None and call in last.pending:
                return None
            if call in self._call_ids:
                return MalformedHistoryError(
                    "duplicate_id", index, mid, f"call {call!r} already has a result"
                )
            return MalformedHistoryError("orphan_result", index, mid, f"no earlier call has id {call!r}")
        if last is not None and last.pending:
            missing = sorted(last.pending)
            return MalformedHistoryError(
                "missing_result",
                last.start,
                missing[0],
                f"tool call(s) {missing} got no result before message {index} ({m.role})",
            )
        # Ids may recur in later rounds (real providers reuse them); within one message they must not.
        ids = [c.id for c in m.tool_calls]
        for c in m.tool_calls:
            if ids.count(c.id) > 1:
                return MalformedHistoryError("duplicate_id", index, c.id, f"tool call id {c.id!r} used twice")
        return None


class _Trial:
    """What a `RoundTracker.trial` restores on exit (a class: a generator's context costs ~2 µs)."""

    __slots__ = ("_count", "_end", "_last", "_pending", "_rounds", "_tracker", "_turn")

    def __init__(self, tracker: RoundTracker) -> None:
        self._tracker = tracker
        self._rounds, self._count, self._turn = len(tracker.rounds), tracker._count, tracker._turn
        # Only the newest round changes in place (its end, its pending calls); later ones are new.
        self._last = last = tracker.rounds[-1] if tracker.rounds else None
        self._end, self._pending = (last.end, set(last.pending)) if last is not None else (0, set[str]())

    def __enter__(self) -> None:
        self._tracker._claimed = []

    def __exit__(self, *exc: object) -> None:
        tracker = self._tracker
        for ids, value in tracker._claimed or ():
            ids.discard(value)
        tracker._claimed = None
        del tracker.rounds[self._rounds :]
        tracker._count, tracker._turn = self._count, self._turn
        if self._last is not None:  # appending only ever takes calls out of `pending`
            self._last.end = self._end
            self._last.pending.update(self._pending)


def current_turn_start(rounds: Sequence[Round], earlier: int = 0) -> int | None:
    """Transcript index of the user message that opened the current turn (None before any).

    With `earlier`, the start of that many complete turns before the current one (as far
    back as there are turns).
    """
    if not rounds or rounds[-1].turn == 0:
        return None
    # `turn` never decreases and a turn's user round is its first: a bisection, not a scan (every view asks).
    wanted = max(rounds[-1].turn - earlier, 1)
    return rounds[bisect_left(rounds, wanted, key=lambda r: r.turn)].start


def split_rounds(messages: Sequence[Message]) -> list[Round]:
    """Split a whole history into rounds; raises `MalformedHistoryError` on the first problem."""
    tracker = RoundTracker()
    tracker.extend(messages)
    return tracker.rounds


class RepairPolicy(enum.StrEnum):
    """What to do with a malformed history instead of raising."""

    RAISE = "raise"
    """Raise `MalformedHistoryError` naming the first offending message (the default)."""
    DROP_ORPHANS = "drop_orphans"
    """Drop tool results whose call is unknown or already answered; still raise on missing results."""
    SYNTHESIZE = "synthesize"
    """Drop orphans, and give each unanswered call a placeholder result saying none was recorded."""


@dataclass(frozen=True, slots=True)
class Repair:
    """One change a repair policy made."""

    kind: str
    """The problem repaired: `orphan_result`, `duplicate_id` or `missing_result`."""
    index: int
    """Position of the offending message in the input."""
    message_id: str
    """Id of the offending message or call."""
    action: str
    """What was done: `dropped` or `synthesized`."""


def repair_history(
    messages: Sequence[Message], policy: RepairPolicy, *, allow_pending_tail: bool = True
) -> tuple[list[Message], list[Repair]]:
    """Return a history that splits cleanly, and the repairs made (none under `RAISE`)."""
    tracker = RoundTracker()
    out, repairs = append_repaired(tracker, messages, policy)
    if not allow_pending_tail and tracker.rounds and tracker.rounds[-1].pending:
        if policy is not RepairPolicy.SYNTHESIZE:
            tracker.require_complete()
        _fill_pending(tracker, out, repairs, len(messages))
    return out, repairs


def append_repaired(
    tracker: RoundTracker, messages: Sequence[Message], policy: RepairPolicy
) -> tuple[list[Message], list[Repair]]:
    """Append `messages` to `tracker` under `policy`; return what was appended and the repairs made."""
    out: list[Message] = []
    repairs: list[Repair] = []
    for i, m in enumerate(messages):
        err = tracker._problem(m, len(tracker), raise_=False)
        if err is None:
            tracker._add(m)
            out.append(m)
            continue
        if policy is RepairPolicy.RAISE:
            raise MalformedHistoryError(err.kind, i, err.message_id, err.detail)
        if err.kind == "missing_result" and policy is RepairPolicy.SYNTHESIZE:
            _fill_pending(tracker, out, repairs, i)
            tracker.append(m)
            out.append(m)
        elif m.role == "tool" and err.kind in ("orphan_result", "duplicate_id"):
            repairs.append(Repair(err.kind, i, err.message_id, "dropped"))
        else:
            raise MalformedHistoryError(err.kind, i, err.message_id, err.detail)
    return out, repairs


def _fill_pending(tracker: RoundTracker, out: list[Message], repairs: list[Repair], index: int) -> None:
    for call_id in sorted(tracker.rounds[-1].pending):
        filler = Message("tool", _NO_RESULT, tool_call_id=call_id, metadata={"ck_kind": "synthetic"})
        tracker.append(filler)
        out.append(filler)
        repairs.append(Repair("missing_result", index, call_id, "synthesized"))
