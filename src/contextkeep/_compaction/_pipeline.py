"""The progressive pipeline: cheap layers first, each change measured, stop when safe.

Compaction triggers at one level and compacts down to a lower target (hysteresis), so it
happens rarely and each pass reclaims enough to be worth a prompt-cache break. A pass
measures the view once at the start, then runs the configured layers (resolved by name
from the registry) in order until the view is at or under the target; layer 4 rescues a
view that still exceeds the budget. Each layer is a pure state change; what leaves the
view is returned as offload work that the session performs *before* saving the state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextkeep._budget import Budget
from contextkeep._compaction._bounds import protection
from contextkeep._compaction._layer import Layer
from contextkeep._compaction._names import LayerName
from contextkeep._compaction._pass import Outcome, PassContext, PassResources, Tools, measure
from contextkeep._compaction._registry import layer_named, resolve_layers
from contextkeep._compaction._summary import SummaryLayer, digest_overflowed
from contextkeep._compaction.builder import ViewBuilder
from contextkeep._compaction.state import CompactionState
from contextkeep._config import ContextConfig
from contextkeep._events import CompressionFailed
from contextkeep._messages import Message
from contextkeep._rounds import Round
from contextkeep._summarizers.base import Summarizer
from contextkeep._tokens import TokenCounter

__all__ = ["Compactor"]


class Compactor:
    """Runs the layers for one conversation."""

    def __init__(
        self,
        config: ContextConfig,
        counter: TokenCounter,
        builder: ViewBuilder,
        reference: Callable[[Sequence[Message]], str],
        summarizer: Summarizer | None = None,
        fallback: Summarizer | None = None,
        conversation_id: str = "",
        status_context: Mapping[str, Any] | None = None,
    ) -> None:
        resolve_layers(config.layers)  # an unknown layer name fails here, naming it
        self.config = config
        """The configuration of a pass that is given none."""
        self.resources = PassResources(
            counter, builder, reference, summarizer, fallback, conversation_id, dict(status_context or {})
        )
        """What every pass works with."""

    @property
    def builder(self) -> ViewBuilder:
        """Derives the views."""
        return self.resources.builder

    @property
    def counter(self) -> TokenCounter:
        """Counts them."""
        return self.resources.counter

    def measure(
        self,
        transcript: Sequence[Message],
        rounds: Sequence[Round],
        state: CompactionState,
        tools: Tools,
        *,
        config: ContextConfig | None = None,
    ) -> tuple[list[Message], int]:
        """The view for `state` (under `config`, by default the compactor's) and its tokens."""
        return measure(
            self.resources, transcript, rounds, state, tools, self.config if config is None else config
        )

    async def run(
        self,
        transcript: Sequence[Message],
        rounds: Sequence[Round],
        state: CompactionState,
        *,
        budget: Budget,
        tools: Tools,
        reason: str,
        target: int,
        force_summary: bool = False,
        reactive: bool = False,
        measured: tuple[list[Message], int] | None = None,
        config: ContextConfig | None = None,
    ) -> Outcome:
        """Apply the configured layers until the view is at or under `target` tokens.

        With `reactive`, only layer 4 runs (after a provider overflow). Otherwise, if the view
        still exceeds the effective budget at the end, layer 4 makes it fit. `measured` is the
        view and tokens of `state`, when the caller has them already; `config` is this pass's
        configuration (by default the compactor's).
        """
        config = self.config if config is None else config
        layers = resolve_layers(config.layers)
        started = time.perf_counter()
        view, tokens = measured or self.measure(transcript, rounds, state, tools, config=config)
        protect = protection(rounds, config.min_keep_recent_rounds, config.keep_recent_turns)
        ctx = PassContext(
            transcript,
            rounds,
            budget,
            config,
            tools,
            str(reason),
            target,
            Outcome(state, view, tokens),
            self.resources,
            protect=protect,
            forced=force_summary,
        )
        if reactive:
            await _run(layer_named(LayerName.REACTIVE), ctx)
        else:
            await _proactive(layers, ctx)
            if not ctx.outcome.changed and not ctx.outcome.failures:
                _nothing_to_compress(ctx)
        ctx.outcome.seconds = time.perf_counter() - started - ctx.outcome.summary_seconds
        return ctx.outcome


def _nothing_to_compress(ctx: PassContext) -> None:
    """Compaction was due but found nothing it may touch: a failure, as Agents-Flex reports it."""
    state = ctx.state
    ctx.outcome.nothing_to_compress = True
    ctx.outcome.failures.append(
        CompressionFailed(
            conversation_id=ctx.conversation_id,
            layer=str(LayerName.PIPELINE),
            compression_reason=ctx.reason,
            error="nothing to compress: every round older than the protected ones is already compacted",
            reason="nothing_to_compress",
            consecutive_failures=state.failures,
            breaker_open=state.breaker_open,
        )
    )


async def _proactive(layers: Sequence[Layer], ctx: PassContext) -> None:
    """The configured layers while the view is over the target (all of them when forced), then L4."""
    if ctx.state.minimal:  # last pass's emergency view: try the ordinary one first
        ctx.propose(LayerName.DROP, ctx.state.evolve(minimal=False))
    for layer in layers:
        # Under the target, only a summary of what dropping lost is still due.
        lossy = isinstance(layer, SummaryLayer) and digest_overflowed(ctx)
        if ctx.tokens <= ctx.target and not ctx.forced and not lossy:
            break
        await _run(layer, ctx)
        if ctx.outcome.error is not None:  # `fail`: the pass stops here; the state is still saved
            return
    effective = ctx.budget.effective
    if effective is not None and ctx.tokens > effective:
        await _run(layer_named(LayerName.REACTIVE), ctx.aiming_at(effective))


async def _run(layer: Layer, ctx: PassContext) -> None:
    if layer.decide(ctx):
        await layer.apply(ctx)
