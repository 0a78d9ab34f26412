"""Where compaction may act: the rounds it may remove, and the recent ones it leaves verbatim."""

from __future__ import annotations

from collections.abc import Sequence

from contextkeep._rounds import Round, current_turn_start

__all__ = ["droppable_rounds", "protected_start", "protection"]


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
