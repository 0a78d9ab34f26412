"""The one protocol every compaction layer, built-in or your own, implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from contextkeep._compaction._pass import PassContext

__all__ = ["Layer"]


@runtime_checkable
class Layer(Protocol):
    """One compaction step: decides whether it is worth running, then proposes new states.

    The pipeline runs the configured layers in order, cheapest first, until the view is at
    or under the pass's target. A layer is a pure state change: it reads the pass
    (transcript, rounds, budget, target, protection, the outcome so far), hands what leaves
    the view to `ctx.offload`, and calls `ctx.propose(self.name, new_state, ...)`; the
    pass measures the view each proposal gives and records the layer's own delta. Register
    a layer with :func:`register_layer` and name it in `ContextConfig.layers`.
    """

    @property
    def name(self) -> str:
        """What records and events call the layer (`L1`, or your own name)."""
        ...

    def decide(self, ctx: PassContext) -> bool:
        """Whether to run in this pass (most layers: while the view is over `ctx.target`)."""
        ...

    async def apply(self, ctx: PassContext) -> None:
        """Propose the new state(s) through `ctx.propose` (a layer may propose several, each measured)."""
        ...
