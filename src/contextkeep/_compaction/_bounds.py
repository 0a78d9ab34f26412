"""Where compaction may act: the rounds it may remove, and the recent ones it leaves verbatim."""

from __future__ import annotations

from collections.abc import Sequence

from contextkeep._rounds import Round, current_turn_start

__all__ = ["droppable_rounds", "first_droppable", "preamble_end", "protected_start", "protection"]


def preamble_end(rounds: Sequence[Round]) -> int:
    """Transcript index just after the leading system preamble (0 without one)."""
    return rounds[0].end if rounds and rounds[0].kind == "system" and rounds[0].index == 0 else 0


def first_droppable(rounds: Sequence[Round], pin_first_user: bool) -> int:
    """Transcript index of the first message compaction may remove."""
    start = 0
    for r in rounds:
        if r.kind == "system" and r.index == 0:
            start = r.end
            continue
        if pin_first_user and r.kind == "user":
            return r.end
        return start
    return start


def droppable_rounds(rounds: Sequence[Round], start: int) -> list[Round]:
    """Complete rounds at or after transcript index `start` (the preamble never counts)."""
    return [r for r in rounds if r.start >= start and not (r.kind == "system" and r.index == 0)]


def protected_start(rounds: Sequence[Round], keep: int) -> int:
    """Transcript index where the newest `keep` rounds (always verbatim) begin."""
    body = [r for r in rounds if not (r.kind == "system" and r.index == 0)]
    if not body:
        return rounds[-1].end if rounds else 0
    return body[max(len(body) - keep, 0)].start


def protection(rounds: Sequence[Round], keep_rounds: int, keep_turns: int | None) -> int:
    """Transcript index from which L1–L3 leave everything verbatim.

    The newest `keep_rounds` rounds always; with `keep_turns` set (Agents-Flex), also the
    current turn and that many complete turns before it.
    """
    start = protected_start(rounds, keep_rounds)
    if keep_turns is None:
        return start
    turn = current_turn_start(rounds, keep_turns)
    return start if turn is None else min(start, turn)
