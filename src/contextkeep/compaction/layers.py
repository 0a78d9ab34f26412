"""The deterministic layers as pure functions of (rounds, state, config) → new state.

- L1 `mask`: tool outputs (and images) of rounds older than `max_observation_age_rounds`
  become previews with references; the boundary only ever moves forward, in one jump.
- L2 `drop`: whole old rounds leave the view until it is at or under the target,
  keeping at least `min_keep_recent_rounds` rounds and `min_keep_tokens` tokens.
- L4 `reactive`: after a provider overflow, mask everything but the last two
  rounds and drop down to them as far as needed.

Token effects are estimated from cached per-message counts; the pipeline recounts
the real view after each layer and calls again if the estimate fell short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contextkeep.compaction.state import CompactionState
from contextkeep.messages import Message
from contextkeep.rounds import Round, current_turn_start

__all__ = ["DropPlan", "droppable_rounds", "mask", "plan_drop", "protected_start", "protection"]


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


def mask(
    rounds: Sequence[Round],
    transcript: Sequence[Message],
    state: CompactionState,
    *,
    age: int,
    protect: int,
    max_images: int,
) -> CompactionState:
    """Move the mask boundary to the round `age` rounds back (never past `protect`)."""
    body = [r for r in rounds if not (r.kind == "system" and r.index == 0)]
    boundary = state.mask_boundary if len(body) <= age else min(body[len(body) - age].start, protect)
    image_boundary = _image_boundary(transcript, max_images, protect)
    return state.evolve(
        mask_boundary=max(state.mask_boundary, boundary),
        image_boundary=max(state.image_boundary, image_boundary),
    )


def _image_boundary(transcript: Sequence[Message], max_images: int, limit: int) -> int:
    """Smallest index such that at most `max_images` images lie at or after it (capped at `limit`)."""
    seen = 0
    for i in range(len(transcript) - 1, -1, -1):
        content = transcript[i].content
        if content is None or isinstance(content, str):
            continue  # plain text: no media (the common case, skipped without building parts)
        seen += len(transcript[i].media)
        if seen > max_images:
            return min(i + 1, limit)
    return 0


@dataclass(frozen=True, slots=True)
class DropPlan:
    """Where a drop moves the cut, and what leaves the view."""

    cut: int
    """New cut (transcript index)."""
    removed: tuple[int, int]
    """Transcript span `[start, end)` newly out of view."""
    rounds: int
    """How many rounds leave."""


def plan_drop(
    rounds: Sequence[Round],
    round_tokens: Sequence[int],
    current_cut: int,
    *,
    excess: int,
    keep_rounds: int,
    keep_tokens: int,
    protect: int | None = None,
) -> DropPlan | None:
    """Drop the fewest oldest rounds from `current_cut` that remove `excess` tokens, within the keep limits.

    `round_tokens[i]` is the view tokens of `rounds[i]`; no round at or after transcript index
    `protect` leaves. Returns `None` when nothing may be dropped.
    """
    candidates = [
        i
        for i, r in enumerate(rounds)
        if r.start >= current_cut and not (r.kind == "system" and r.index == 0)
    ]
    if len(candidates) <= keep_rounds:
        return None
    kept_tokens = sum(round_tokens[i] for i in candidates)
    removed = 0
    last = None
    for i in candidates[: len(candidates) - keep_rounds]:
        if protect is not None and rounds[i].start >= protect:
            break
        if removed >= excess or kept_tokens - round_tokens[i] < keep_tokens:
            break
        removed += round_tokens[i]
        kept_tokens -= round_tokens[i]
        last = i
    if last is None:
        return None
    first_round = rounds[candidates[0]]
    end = rounds[last].end
    return DropPlan(end, (first_round.start, end), last - candidates[0] + 1)
