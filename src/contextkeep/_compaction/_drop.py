"""Layer 2, round dropping: whole old rounds leave the view behind one marker.

Rounds go oldest first until the view is at or under the target, keeping at least
`min_keep_recent_rounds` rounds and `min_keep_tokens` tokens of the newest. Their effect
is estimated from per-round counts; the pass measures the real view after each drop and
drops again (a few times) if the estimate fell short. Layer 4 drops with the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contextkeep._compaction._bounds import droppable_rounds, first_droppable
from contextkeep._compaction._digest import build_digest
from contextkeep._compaction._names import LayerName
from contextkeep._compaction._pass import PassContext
from contextkeep._compaction.render import dropped_marker
from contextkeep._rounds import Round

__all__ = ["DropLayer", "DropPlan", "drop", "plan_drop"]

_DIGEST_MAX_SHARE = 0.16
"""The largest share of the effective budget the digest takes."""


class DropLayer:
    """L2: drop the oldest rounds down to the target, within the keep limits."""

    name = LayerName.DROP
    """`L2`."""

    def decide(self, ctx: PassContext) -> bool:
        """While the view is over the target."""
        return ctx.tokens > ctx.target

    async def apply(self, ctx: PassContext) -> None:
        """Drop rounds (never the protected ones)."""
        keep_rounds, keep_tokens = ctx.config.min_keep_recent_rounds, ctx.keep_tokens()
        drop(ctx, self.name, keep_rounds=keep_rounds, keep_tokens=keep_tokens, protect=ctx.protect)


def drop(
    ctx: PassContext, layer: str, *, keep_rounds: int, keep_tokens: int, protect: int | None = None
) -> None:
    """Drop the oldest rounds until the view is at or under `ctx.target`; record it under `layer`."""
    out, transcript = ctx.outcome, ctx.transcript
    start = first_droppable(ctx.rounds, ctx.config.pin_first_user)
    # The estimate can fall short (framing context, the marker's own tokens): retry a few times.
    for _ in range(4):
        if out.tokens <= ctx.target:
            return
        cut = max(out.state.cut, start)
        candidates = droppable_rounds(ctx.rounds, cut)
        sizes = ctx.round_tokens(candidates)
        excess = out.tokens - ctx.target
        summarised = out.state.summary.cursor if out.state.summary else 0
        if out.state.drop_cursor <= max(start, summarised):  # no marker in view: one comes with the drop
            excess += _marker_tokens(ctx, candidates)
        # The digest grows with the drop, up to its budget (a generous estimate: the view is measured).
        digest_budget = _digest_budget(ctx)
        excess += max(digest_budget - len(out.state.drop_digest) // 4, 0) if digest_budget else 0
        plan = plan_drop(
            candidates,
            sizes,
            cut,
            excess=excess,
            keep_rounds=keep_rounds,
            keep_tokens=keep_tokens,
            protect=protect,
        )
        if plan is None:
            return
        dropped_from = max(start, summarised)
        reference = ctx.reference(transcript[dropped_from : plan.cut])
        removed = ctx.offload(transcript[plan.removed[0] : plan.removed[1]])
        digest = build_digest(transcript, dropped_from, plan.cut, ctx.counter, digest_budget)
        new = out.state.evolve(
            drop_cursor=plan.cut,
            drop_reference=reference,
            drop_digest=digest.text,
            drop_digest_full=digest.full,
        )
        ctx.propose(layer, new, span=plan.removed, references=(removed,))


def _digest_budget(ctx: PassContext) -> int:
    """`drop_digest_tokens`, at most 16 % of the budget: in a small window it would refill the view."""
    cap = ctx.budget.tokens_at(_DIGEST_MAX_SHARE)
    budget = ctx.config.drop_digest_tokens
    return budget if cap is None else min(budget, cap)


def _marker_tokens(ctx: PassContext, candidates: Sequence[Round]) -> int:
    """About what the dropped-rounds marker will cost, without encoding it (ids, a path, English).

    A generous three characters a token; the view is measured exactly right after.
    """
    if not candidates:
        return 0
    transcript = ctx.transcript
    first, last = transcript[candidates[0].start], transcript[candidates[-1].end - 1]
    span = transcript[candidates[0].start : candidates[-1].end]
    text = dropped_marker(len(candidates), first.id or "", last.id or "", ctx.reference(span))
    return len(text) // 3 + 4


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
