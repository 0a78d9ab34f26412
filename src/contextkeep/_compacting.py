"""One compaction pass of a session, from the lease to the saved state.

The layers themselves are pure (the `Compactor` of `contextkeep.compaction`): they
return a new state and what left the view. Around them, in this order: a lease keeps two
instances from compacting (and paying for a summary) at once; what left the view is offloaded
*before* the state that references it is saved; the state is saved with compare-and-set (on
conflict, the pass runs again on the winner's state); a pass that changed the view invalidates
the usage baseline (the usage policy says so); then the events report what happened.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contextkeep._budget import Budget
from contextkeep._cas import LOST, CompareAndSet, Lost
from contextkeep._compaction import CompressionReason, LayerName, Outcome
from contextkeep._compaction._pipeline import Compactor
from contextkeep._compaction.builder import ViewBuilder
from contextkeep._compaction.state import CompactionState
from contextkeep._config import ContextConfig, UsageMode
from contextkeep._deps import SessionDeps
from contextkeep._documents import Documents
from contextkeep._emitter import Emitter
from contextkeep._errors import ContextOverflowError, OverflowPhase
from contextkeep._events import CompressionCompleted, CompressionStarted, ContextOffloaded
from contextkeep._lease import Lease
from contextkeep._messages import Message
from contextkeep._tokens import TokenCounter
from contextkeep._transcript import Transcript
from contextkeep._usage_policy import UsagePolicy

__all__ = ["Compacting", "Measured", "PassRequest"]

Tools = Sequence[Mapping[str, Any]] | None
_LEASE = "compaction"


@dataclass(frozen=True, slots=True)
class Measured:
    """A view and its prompt tokens, as counted (a pass reuses them while the view stays the same)."""

    view: list[Message]
    """The view (the very list the counter counted)."""
    tokens: int
    """Its prompt tokens."""
    length: int = -1
    """How many messages the view held when counted (the builder extends its list in place later)."""

    def __post_init__(self) -> None:
        if self.length < 0:
            object.__setattr__(self, "length", len(self.view))


@dataclass(frozen=True, slots=True)
class PassRequest:
    """What one compaction pass is asked to do."""

    budget: Budget
    """The budget of the coming call."""
    tools: Tools
    """The tools it sends (counted with the view)."""
    reason: str
    """Why the pass runs (a `CompressionReason`, or the reason a pending flag was set with)."""
    target: int
    """Tokens to compact down to."""
    config: ContextConfig
    """The configuration of this pass (the session's, or one with overrides)."""
    force: bool = False
    """Consume a pending `compression_required` flag (summarise even under the target)."""
    reactive: bool = False
    """Layer 4 only (after a provider overflow)."""


class Compacting:
    """Runs compaction passes for one conversation and persists their results."""

    def __init__(
        self,
        deps: SessionDeps,
        *,
        counter: TokenCounter,
        builder: ViewBuilder,
        transcript: Transcript,
        documents: Documents,
        policy: UsagePolicy,
        cas: CompareAndSet,
        events: Emitter,
        load: Callable[[ContextConfig], Awaitable[None]],
        flush: Callable[[], Awaitable[None]],
    ) -> None:
        conversation_id = cas.conversation_id
        self.conversation_id = conversation_id
        """Whose passes they are."""
        self.workspace = deps.workspace
        """Where what leaves the view is offloaded."""
        self.builder = builder
        """Derives the view of a state."""
        self.compactor = Compactor(
            deps.config,
            counter,
            builder,
            lambda ms: self.workspace.context_ref(conversation_id, ms),
            summarizer=deps.summarizer,
            fallback=deps.fallback_summarizer,
            conversation_id=conversation_id,
            status_context={"model_key": deps.model.key},
        )
        """The layers."""
        self._log, self._docs, self._policy = transcript, documents, policy
        self._cas, self._events, self._load = cas, events, load
        self._flush = flush
        """Waits for the session's queued tool-result copies: a state about to name them is saved after."""
        self._lease = Lease(cas.store, conversation_id, _LEASE)

    def measure(self, tools: Tools, config: ContextConfig) -> Measured:
        """The view of the current state under `config`, and its tokens (tools included)."""
        log, state = self._log, self._docs.compaction
        return Measured(*self.compactor.measure(log.messages, log.rounds, state, tools, config=config))

    async def run(self, request: PassRequest, measured: Measured | None = None) -> Outcome:
        """Run a pass under the lease and save its state; `measured` is the current view, if counted.

        The loser of the lease waits, reloads, and compacts only if the winner's result is not enough.
        """

        async def load() -> None:  # with this pass's config: the hooks resolve for the views it builds
            await self._load(request.config)

        async def attempt() -> Outcome | Literal[Lost.LOST]:
            nonlocal measured  # only the first attempt: a lost one counted other views since
            given, measured = measured, None
            return await self._attempt(request, force, given)

        config = request.config
        async with self._lease.held(config.lease_ttl_ms, config.lease_heartbeat()):
            await load()  # the previous holder may have compacted already
            # A flag another instance already consumed is not ours to act on again.
            force = request.force and self._docs.compaction.compression_required
            return await self._cas.retry(
                attempt, f"save the compaction state of {self.conversation_id!r}: it kept changing", load
            )

    async def due(
        self, measured: Measured, budget: Budget, tools: Tools, config: ContextConfig
    ) -> tuple[list[Message], int, tuple[str, ...]]:
        """The passes a `prepare` owes: a deferred flag first, then the local count (view, tokens, layers).

        `measured` is the view as it stands: the first pass reuses its count.
        """
        view, tokens = measured.view, measured.tokens
        layers: tuple[str, ...] = ()
        start, target = pass_trigger(budget, config), budget.tokens_at(config.target_ratio)
        given: Measured | None = measured
        mode = config.usage_mode
        if target is None:
            return view, tokens, layers
        state = self._docs.compaction
        if state.compression_required and mode is not UsageMode.LOCAL_ONLY:
            reason = state.compression_reason or CompressionReason.THRESHOLD_REACHED
            outcome = await self.run(PassRequest(budget, tools, reason, target, config, force=True), given)
            view, tokens, given, layers = outcome.view, outcome.tokens, None, outcome.layers
        if mode is not UsageMode.CONFIRMED_ONLY and start is not None and tokens >= start:
            outcome = await self.run(
                PassRequest(budget, tools, CompressionReason.BUDGET, target, config), given
            )
            view, tokens, layers = outcome.view, outcome.tokens, (*layers, *outcome.layers)
        return view, tokens, layers

    async def recover(
        self, overflow: ContextOverflowError, budget: Budget, tools: Tools, config: ContextConfig
    ) -> Outcome | None:
        """Layer 4 after `overflow`: the pass that makes the same call fit, or None when nothing shrinks."""
        measured = self.measure(tools, config)
        margin = config.recovery_margin_tokens
        target = recovery_target(measured.tokens, overflow, margin, budget.reserved_output)
        reason = CompressionReason.OVERFLOW_RECOVERY
        outcome = await self.run(PassRequest(budget, tools, reason, target, config, reactive=True), measured)
        return outcome if outcome.changed and outcome.tokens < measured.tokens else None

    def _measure(
        self, state: CompactionState, request: PassRequest, given: Measured | None
    ) -> tuple[list[Message], int]:
        """The view of `state` and its tokens: `given`'s count while it is still the view.

        The view is rebuilt (cheap: derived messages are cached) but not counted again.
        """
        log, config = self._log, request.config
        if given is not None:
            view = self.builder.build(log.messages, log.rounds, state, config=config)
            # The very list counted, as long as it was (a reload may have appended since): the
            # counter's totals still answer for it. The builder hands back the same list while it
            # only extends it, so identity settles it without comparing the history.
            if len(view) == given.length and (view is given.view or view == given.view):
                return given.view, given.tokens
        return self.compactor.measure(log.messages, log.rounds, state, request.tools, config=config)

    async def _attempt(
        self, request: PassRequest, force: bool, measured: Measured | None
    ) -> Outcome | Literal[Lost.LOST]:
        before = self._docs.compaction
        view, tokens = self._measure(before, request, measured)
        await self._events.aemit(
            CompressionStarted(
                layer=str(LayerName.PIPELINE),
                compression_reason=request.reason,
                tokens_before=tokens,
                compression_required=before.compression_required,
            )
        )
        outcome = await self.compactor.run(
            self._log.messages,
            self._log.rounds,
            before,
            budget=request.budget,
            tools=request.tools,
            reason=request.reason,
            target=request.target,
            force_summary=force,
            reactive=request.reactive,
            measured=(view, tokens),
            config=request.config,
        )
        for failure in outcome.failures:
            await self._events.aemit(failure)
        await self._flush()
        offload_seconds = await self._offload(outcome)
        new = outcome.state.evolve(
            compression_required=False, compression_reason="", compression_required_at=None
        )
        if new == before:
            return _raised(outcome)
        if not await self._docs.save_compaction(new, before.version):
            return LOST
        if outcome.changed:
            await self._docs.save_usage(self._policy.compacted(self._docs.usage))
        await self._completed(request.reason, outcome, before, tokens, offload_seconds)
        outcome.state = self._docs.compaction
        return _raised(outcome)

    async def _offload(self, outcome: Outcome) -> float:
        """Offload what left the view (one durable append for the whole pass); the seconds it took."""
        started = time.perf_counter()
        if outcome.offloads:
            removed = [m for span in outcome.offloads for m in span]
            await self.workspace.offload_context(self.conversation_id, removed)
            for span in outcome.offloads:
                ref = self.workspace.context_ref(self.conversation_id, span)
                await self._events.aemit(ContextOffloaded(reference=ref, kind="context", messages=len(span)))
        return time.perf_counter() - started

    async def _completed(
        self, reason: str, outcome: Outcome, before: CompactionState, tokens: int, offload_seconds: float
    ) -> None:
        """Report a saved pass: a status after each layer that ran, then `context.compression.completed`."""
        for status in outcome.statuses:
            await self._events.aemit(status)
        usage, new = self._docs.usage, self._docs.compaction
        await self._events.aemit(
            CompressionCompleted(
                usage_status=usage.status.value,
                usage_baseline_valid=usage.valid,
                layer=",".join(outcome.layers) or "none",
                compression_reason=reason,
                tokens_before=tokens,
                tokens_after=outcome.tokens,
                references=tuple(r for rec in new.records[len(before.records) :] for r in rec.references),
                layers_ms=outcome.seconds * 1e3,
                summary_ms=outcome.summary_seconds * 1e3,
                summary_wait_ms=(outcome.summary_seconds - outcome.summary_cpu_seconds) * 1e3,
                summary_cpu_ms=outcome.summary_cpu_seconds * 1e3,
                offload_ms=offload_seconds * 1e3,
                required_at=before.compression_required_at,
                into_current_turn=outcome.into_current_turn,
            )
        )


def pass_trigger(budget: Budget, config: ContextConfig) -> int | None:
    """Tokens at which a pass starts: the trigger ratio of the window (AgentScope), else the warning level."""
    if config.trigger_ratio is not None and budget.context_window is not None:
        return int(config.trigger_ratio * budget.context_window)
    return budget.tokens_at(config.warning_threshold)


def recovery_target(local: int, overflow: ContextOverflowError, margin: int, reserved: int = 0) -> int:
    """The local token count layer 4 aims at after `overflow` (the view counted `local` tokens here).

    The retried prompt must fit the limit less the reply it reserves: the output the
    provider says was requested, else `reserved` (the budget's, from the request's
    `max_tokens`). The provider's count may differ from ours, so the provider's prompt
    figure is scaled into local tokens.
    """
    limit, requested, output = overflow.limit, overflow.requested, overflow.requested_output
    if not limit or not requested or requested <= 0:
        return 0  # unknown gap: down to the system prompt and the last two rounds
    if overflow.phase is OverflowPhase.TOTAL_CONTEXT:
        if output is None or output >= requested:  # the prompt's share is not stated
            return max(int(local * limit / requested) - margin, 0)
        prompt, fits = requested - output, limit - output
    else:
        prompt, fits = requested, limit - (output if output is not None else reserved)
    return max(int(local * fits / prompt) - margin, 0)


def _raised(outcome: Outcome) -> Outcome:
    """The outcome, or its summary failure raised (`fail` strategy) now that the state is saved."""
    if outcome.error is not None:
        raise outcome.error
    return outcome
