"""The progressive pipeline: cheap layers first, recount after each, stop when safe.

Compaction triggers at one level and compacts down to a lower target
(hysteresis), so it happens rarely and each pass reclaims enough to be worth a
prompt-cache break. Each layer is a pure state change; what leaves the view is
returned as offload work that the session performs *before* saving the state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextkeep.budget import Budget
from contextkeep.compaction.builder import ViewBuilder, first_droppable
from contextkeep.compaction.layers import droppable_rounds, mask, plan_drop, protected_start, protection
from contextkeep.compaction.render import dropped_marker
from contextkeep.compaction.state import CompactionRecord, CompactionState, Summary
from contextkeep.config import ContextConfig, FailureStrategy
from contextkeep.errors import SummaryError
from contextkeep.events import CompressionFailed, ContextStatus
from contextkeep.messages import Message
from contextkeep.rounds import Round, current_turn_start
from contextkeep.summarizers.base import Summarizer, SummaryRequest, SummaryResult
from contextkeep.tokens import TokenCounter

__all__ = ["Compactor", "Outcome"]

logger = logging.getLogger("contextkeep.compaction")

Tools = Sequence[Mapping[str, Any]] | None


@dataclass(slots=True)
class Outcome:
    """The result of one compaction pass."""

    state: CompactionState
    """The new state (unsaved)."""
    view: list[Message]
    """The view it gives."""
    tokens: int
    """Its prompt tokens."""
    statuses: list[ContextStatus] = field(default_factory=list)
    """One status after each layer that changed the view."""
    offloads: list[list[Message]] = field(default_factory=list)
    """Message spans to offload before the state is saved."""
    failures: list[CompressionFailed] = field(default_factory=list)
    """Summary failures met on the way."""
    seconds: float = 0.0
    """Time the pass took, summariser calls excluded."""
    summary_seconds: float = 0.0
    """Time spent waiting for the summariser."""
    error: SummaryError | None = None
    """Under the `fail` strategy, the summary failure to raise once the state is saved."""
    nothing_to_compress: bool = False
    """Compaction was due but every round was protected (reported as a failure, as Agents-Flex does)."""
    into_current_turn: bool = False
    """L4 cut into the current turn (the one place that may)."""

    @property
    def changed(self) -> bool:
        """Whether any layer changed the view."""
        return bool(self.statuses)


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
        self.config = config
        self.counter = counter
        self.builder = builder
        self.reference = reference
        self.summarizer = summarizer
        self.fallback = fallback
        self.conversation_id = conversation_id
        self.status_context = dict(status_context or {})

    def measure(
        self, transcript: Sequence[Message], rounds: Sequence[Round], state: CompactionState, tools: Tools
    ) -> tuple[list[Message], int]:
        """The view for `state` and its tokens."""
        view = self.builder.build(transcript, rounds, state)
        return view, self.counter.count_prompt(view, tools)

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
    ) -> Outcome:
        """Apply the configured layers until the view is at or under `target` tokens.

        With `reactive`, only layer 4 runs (after a provider overflow). Otherwise, if the view
        still exceeds the effective budget at the end, layer 4 makes it fit. `measured` is the
        view and tokens of `state`, when the caller has them already.
        """
        started = time.perf_counter()
        view, tokens = measured or self.measure(transcript, rounds, state, tools)
        protect = protection(rounds, self.config.min_keep_recent_rounds, self.config.keep_recent_turns)
        p = _Pass(transcript, rounds, budget, tools, reason, Outcome(state, view, tokens), protect)
        await self._layers(p, target, force_summary=force_summary, reactive=reactive)
        if not reactive and not p.out.changed and not p.out.failures:
            self._nothing_to_compress(p)
        p.out.seconds = time.perf_counter() - started - p.out.summary_seconds
        return p.out

    async def _layers(self, p: _Pass, target: int, *, force_summary: bool, reactive: bool) -> None:
        if reactive:
            self._reactive(p, target)
            return
        state, budget = p.out.state, p.budget
        if state.minimal:
            self._apply(p, "L2", state.evolve(minimal=False))
        error_tokens = budget.tokens_at(self.config.error_threshold)
        for layer in self.config.layers:
            if p.out.tokens <= target and not (layer == "L3" and force_summary):
                if not force_summary:
                    break
                continue
            if layer == "L1":
                config = self.config
                age, images = config.max_observation_age_rounds, config.max_image_num
                new = mask(p.rounds, p.transcript, p.out.state, age=age, protect=p.protect, max_images=images)
                self._apply(p, "L1", new)
            elif layer == "L2":
                keep_rounds, keep_tokens = self.config.min_keep_recent_rounds, self._keep_tokens(budget)
                self._drop(p, target, keep_rounds, keep_tokens, "L2", p.protect)
            elif self._summary_due(p.out.tokens, target, error_tokens, force_summary):
                await self._summarize(p)
                if p.out.error is not None:  # `fail`: the pass stops here; the state is still saved
                    return
        effective = budget.effective
        if effective is not None and p.out.tokens > effective:
            self._reactive(p, effective)

    def _nothing_to_compress(self, p: _Pass) -> None:
        state = p.out.state
        p.out.nothing_to_compress = True
        p.out.failures.append(
            CompressionFailed(
                conversation_id=self.conversation_id,
                layer="pipeline",
                compression_reason=p.reason,
                error="nothing to compress: every round older than the protected ones is already compacted",
                reason="nothing_to_compress",
                consecutive_failures=state.failures,
                breaker_open=state.breaker_open,
            )
        )

    def _reactive(self, p: _Pass, target: int) -> None:
        """L4: down to the system prompt and the last two rounds, into the current turn if need be."""
        keep = min(2, self.config.min_keep_recent_rounds)
        state = before = p.out.state
        boundary = protected_start(p.rounds, keep)
        if boundary > state.mask_boundary:
            self._apply(
                p,
                "L4",
                state.evolve(mask_boundary=boundary, image_boundary=max(state.image_boundary, boundary)),
            )
        if p.out.tokens > target:
            self._drop(p, target, keep, 0, "L4")
        if p.out.tokens > target and not p.out.state.minimal:
            self._apply(p, "L4", p.out.state.evolve(minimal=True))
        after, turn = p.out.state, current_turn_start(p.rounds)
        reach = max(after.mask_boundary, after.cut, len(p.transcript) if after.minimal else 0)
        if turn is not None and after != before and reach > turn:
            p.out.into_current_turn = True

    def _summary_due(self, tokens: int, target: int, error_tokens: int | None, force: bool) -> bool:
        """DB-GPT: summarise at or above the error threshold; AgentScope (trigger ratio set): above target."""
        if force:
            return True
        if self.config.trigger_ratio is not None:
            return tokens > target
        return error_tokens is not None and tokens >= error_tokens

    def _keep_tokens(self, budget: Budget) -> int:
        if self.config.reserve_ratio is not None and budget.context_window is not None:
            return int(self.config.reserve_ratio * budget.context_window)
        # DB-GPT's floor was set for 120k windows; in a small window it would leave nothing to compact.
        cap = budget.tokens_at(self.config.min_keep_tokens_max_ratio)
        return self.config.min_keep_tokens if cap is None else min(self.config.min_keep_tokens, cap)

    def _apply(
        self,
        p: _Pass,
        layer: str,
        new: CompactionState,
        span: tuple[int, int] = (0, 0),
        references: tuple[str, ...] = (),
    ) -> None:
        out = p.out
        if new == out.state:
            return
        if new.progress_shown != len(new.progress):  # the prefix changes anyway: show progress now
            new = new.evolve(progress_shown=len(new.progress))
        view, tokens = self.measure(p.transcript, p.rounds, new, p.tools)
        if tokens == out.tokens and view == out.view:  # moved a boundary over nothing it changes
            out.state = new
            return
        record = CompactionRecord(layer, p.reason, out.tokens, tokens, span[0], span[1], references)
        out.state = new.evolve(records=(*new.records, record))
        out.view, out.tokens = view, tokens
        out.statuses.append(
            ContextStatus.measure(
                tokens,
                p.budget,
                source=self.counter.source,
                layer=layer,
                conversation_id=self.conversation_id,
                **self.status_context,
            )
        )
        logger.info(
            "%s %s: %d -> %d tokens (%s)", self.conversation_id, layer, record.tokens_before, tokens, p.reason
        )

    def _drop(
        self,
        p: _Pass,
        target: int,
        keep_rounds: int,
        keep_tokens: int,
        layer: str,
        protect: int | None = None,
    ) -> None:
        out, transcript = p.out, p.transcript
        start = first_droppable(p.rounds, self.config.pin_first_user)
        # The estimate can fall short (framing context, the marker's own tokens): retry a few times.
        for _ in range(4):
            if out.tokens <= target:
                return
            cut = max(out.state.cut, start)
            candidates = droppable_rounds(p.rounds, cut)
            sizes = self._round_tokens(out.view, transcript, candidates)
            excess = out.tokens - target
            summarised = out.state.summary.cursor if out.state.summary else 0
            if out.state.drop_cursor <= max(start, summarised):  # no marker in view: one comes with the drop
                excess += self._marker_tokens(transcript, candidates)
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
            removed = list(transcript[plan.removed[0] : plan.removed[1]])
            dropped_from = max(start, summarised)
            reference = self.reference(transcript[dropped_from : plan.cut])
            out.offloads.append(removed)
            new = out.state.evolve(drop_cursor=plan.cut, drop_reference=reference)
            self._apply(p, layer, new, plan.removed, (self.reference(removed),))

    def _marker_tokens(self, transcript: Sequence[Message], candidates: Sequence[Round]) -> int:
        """About what the dropped-rounds marker will cost, without encoding it (ids, a path, English).

        A generous three characters a token; the view is measured exactly right after.
        """
        if not candidates:
            return 0
        first, last = transcript[candidates[0].start], transcript[candidates[-1].end - 1]
        span = transcript[candidates[0].start : candidates[-1].end]
        text = dropped_marker(len(candidates), first.id or "", last.id or "", self.reference(span))
        return len(text) // 3 + 4

    def _summary_cursor(self, p: _Pass, start: int) -> int:
        """Where the summary ends: before the newest rounds that hold the kept recent tokens (and rounds)."""
        out, rounds = p.out, p.rounds
        cursor = p.protect
        candidates = [r for r in droppable_rounds(rounds, max(out.state.cut, start)) if r.start < cursor]
        sizes = self._round_tokens(out.view, p.transcript, candidates)
        kept = sum(self._round_tokens(out.view, p.transcript, [r for r in rounds if r.start >= cursor]))
        keep_tokens = self._keep_tokens(p.budget)
        # Walk back from the protected rounds while the recent part is still short of its token floor.
        for r, size in zip(reversed(candidates), reversed(sizes), strict=True):
            if kept >= keep_tokens:
                break
            kept += size
            cursor = r.start
        return cursor

    def _round_tokens(
        self, view: Sequence[Message], transcript: Sequence[Message], rounds: Sequence[Round]
    ) -> list[int]:
        # The view ends with the transcript's tail (from the cut), so index arithmetic finds each message.
        shift = len(view) - len(transcript)
        last = getattr(self.counter, "last_totals", None)
        totals: list[int] | None = last(view) if last is not None else None
        if totals is not None:  # the counter's last prompt is this view: reuse its counts
            return [
                totals[shift + r.end - 1] - (totals[shift + r.start - 1] if shift + r.start else 0)
                for r in rounds
            ]
        return [
            sum(self.counter.count_message(view[shift + i]) for i in range(r.start, r.end)) for r in rounds
        ]

    async def _summarize(self, p: _Pass) -> None:
        out, state = p.out, p.out.state
        if self.summarizer is None and self.fallback is None:
            return
        first = first_droppable(p.rounds, self.config.pin_first_user)
        start = max(first, state.summary.cursor if state.summary else 0)
        cursor = self._summary_cursor(p, start)
        if cursor <= start:
            return
        covered = list(p.transcript[start:cursor])
        request = SummaryRequest(self.conversation_id, covered, state.summary, self.config, self.counter)
        summarizer = self.summarizer if self.summarizer is not None else self.fallback
        assert summarizer is not None
        if state.breaker_open:  # the breaker keeps the failing summariser out until a reset
            result = await self._after_failure(p, summarizer, request, None)
        else:
            try:
                result = await self._timed_summary(p, summarizer, request)
                if not result.text.strip():
                    raise SummaryError("the summariser returned an empty summary")
                out.state = state.evolve(failures=0)
            except SummaryError as exc:
                result = await self._after_failure(p, summarizer, request, exc)
        if result is None:
            return
        reference = self.reference(p.transcript[first:cursor])
        summary = Summary(result.text, cursor, result.data, result.method, reference)
        out.offloads.append(covered)
        self._apply(p, "L3", out.state.evolve(summary=summary), (start, cursor), (self.reference(covered),))

    async def _after_failure(
        self, p: _Pass, summarizer: Summarizer, request: SummaryRequest, exc: SummaryError | None
    ) -> SummaryResult | None:
        """Count a failure (`exc`, or None when the open breaker skipped the call), then apply the strategy.

        Returns the fallback's summary, or None when the view stays as it is.
        """
        state, strategy = p.out.state, self.config.compression_failure_strategy
        if exc is None:
            failures, breaker = state.failures, True
            error = SummaryError(f"circuit breaker open after {failures} consecutive summary failures")
        else:
            failures = state.failures + 1
            breaker = failures >= self.config.max_compact_failures
            error = exc
        if exc is not None or strategy is FailureStrategy.FAIL:  # an open breaker's fallback is no news
            self._failed(p, error, failures, breaker, "summary_failed" if exc is not None else "breaker_open")
        p.out.state = state.evolve(failures=failures, breaker_open=breaker)
        if strategy is FailureStrategy.FAIL:
            p.out.error = error
            return None
        if strategy is FailureStrategy.USE_ORIGINAL or self.fallback is None or summarizer is self.fallback:
            return None
        return await self._timed_summary(p, self.fallback, request)

    def _failed(self, p: _Pass, error: SummaryError, failures: int, breaker: bool, reason: str) -> None:
        p.out.failures.append(
            CompressionFailed(
                conversation_id=self.conversation_id,
                layer="L3",
                compression_reason=p.reason,
                error=str(error),
                reason=reason,
                consecutive_failures=failures,
                breaker_open=breaker,
            )
        )

    @staticmethod
    async def _timed_summary(p: _Pass, summarizer: Summarizer, request: SummaryRequest) -> SummaryResult:
        started = time.perf_counter()
        try:
            return await summarizer.summarize(request)
        finally:
            p.out.summary_seconds += time.perf_counter() - started


@dataclass(slots=True)
class _Pass:
    """One compaction pass: what every layer reads, and the outcome it updates."""

    transcript: Sequence[Message]
    rounds: Sequence[Round]
    budget: Budget
    tools: Tools
    reason: str
    out: Outcome
    protect: int = 0
    """Transcript index from which L1–L3 keep everything verbatim (recent rounds, protected turns)."""
