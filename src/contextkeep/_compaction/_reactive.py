"""Layer 4, reactive compaction: after a provider overflow, or when the view still exceeds the budget.

Everything but the last two rounds is masked, then dropped as far as needed, and as a last
resort the pinned task, summary and marker leave too (the minimal view). It is the one
layer that may cut into the current turn.
"""

from __future__ import annotations

from contextkeep._compaction._bounds import protected_start
from contextkeep._compaction._drop import drop
from contextkeep._compaction._names import LayerName
from contextkeep._compaction._pass import PassContext
from contextkeep._rounds import current_turn_start

__all__ = ["ReactiveLayer"]


class ReactiveLayer:
    """L4: down to the system prompt and the last two rounds, into the current turn if need be."""

    name = LayerName.REACTIVE
    """`L4`."""

    def decide(self, ctx: PassContext) -> bool:
        """Always: the pipeline calls it only after an overflow or when the view exceeds the budget."""
        return True

    async def apply(self, ctx: PassContext) -> None:
        """Mask, drop, then leave out the head, each only while the view is over the target."""
        keep = min(2, ctx.config.min_keep_recent_rounds)
        state = before = ctx.state
        boundary = protected_start(ctx.rounds, keep)
        if boundary > state.mask_boundary:
            image_boundary = max(state.image_boundary, boundary)
            ctx.propose(self.name, state.evolve(mask_boundary=boundary, image_boundary=image_boundary))
        if ctx.tokens > ctx.target:
            drop(ctx, self.name, keep_rounds=keep, keep_tokens=0)
        if ctx.tokens > ctx.target and not ctx.state.minimal:
            ctx.propose(self.name, ctx.state.evolve(minimal=True))
        after, turn = ctx.state, current_turn_start(ctx.rounds)
        reach = max(after.mask_boundary, after.cut, len(ctx.transcript) if after.minimal else 0)
        if turn is not None and after != before and reach > turn:
            ctx.outcome.into_current_turn = True
