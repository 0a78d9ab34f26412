"""Layer 3, the summary: old rounds become one structured summary, updated from the previous one.

It runs at or above the error threshold (DB-GPT), above the target once AgentScope's
trigger ratio is set, whenever a deferred compression is due (Agents-Flex), and, with a
summariser of the user's own, when dropping lost too much: the digest of the dropped rounds
overflowed its budget. The summary then takes the place of the marker and its digest, and
is asked to keep the digest's lines. Failures
count towards a circuit breaker; the failure strategy says what happens instead.
"""

from __future__ import annotations

import time

from contextkeep._compaction._bounds import droppable_rounds, first_droppable
from contextkeep._compaction._digest import digest_lines
from contextkeep._compaction._names import LayerName
from contextkeep._compaction._pass import PassContext
from contextkeep._compaction.state import Summary
from contextkeep._config import FailureStrategy
from contextkeep._errors import SummaryError
from contextkeep._events import CompressionFailed
from contextkeep._summarizers.base import Summarizer, SummaryRequest, SummaryResult

__all__ = ["SummaryLayer", "digest_overflowed"]


def digest_overflowed(ctx: PassContext) -> bool:
    """The dropped-rounds digest in view could not hold what it would have kept, and a model can summarise.

    Only a summariser of its own (a model's) compresses beyond the digest: the LLM-free fallback
    keeps less of it than the digest itself (on the DeepSeek replays, 0.93 of the reused terms in
    view instead of 0.95), so without one the digest stays.
    """
    state = ctx.state
    if ctx.resources.summarizer is None or not state.drop_digest_full:
        return False
    return state.drop_cursor > (state.summary.cursor if state.summary else 0)


class SummaryLayer:
    """L3: summarise the rounds before the newest ones that hold the kept recent tokens."""

    name = LayerName.SUMMARY
    """`L3`."""

    def decide(self, ctx: PassContext) -> bool:
        """When compacting needs it (`_needed`), or the digest of dropped rounds overflowed."""
        return _needed(ctx) or digest_overflowed(ctx)

    async def apply(self, ctx: PassContext) -> None:
        """Summarise (or fall back), then replace the summarised rounds with the summary."""
        resources, state = ctx.resources, ctx.state
        summarizer = resources.summarizer if resources.summarizer is not None else resources.fallback
        if summarizer is None:
            return
        first = first_droppable(ctx.rounds, ctx.config.pin_first_user)
        start = max(first, state.summary.cursor if state.summary else 0)
        # To keep what dropping lost, the summary takes the dropped rounds' place, no more, and is
        # given their digest; made for room, it gets no more to fit than before.
        needed = _needed(ctx)
        cursor = _summary_cursor(ctx, start) if needed else state.drop_cursor
        if cursor <= start:
            return
        covered = list(ctx.transcript[start:cursor])
        digest = [] if needed else digest_lines(state.drop_digest)
        request = SummaryRequest(
            ctx.conversation_id, covered, state.summary, ctx.config, ctx.counter, digest=digest
        )
        if state.breaker_open:  # the breaker keeps the failing summariser out until a reset
            result = await _after_failure(ctx, summarizer, request, None)
        else:
            try:
                result = await _timed_summary(ctx, summarizer, request)
                if not result.text.strip():
                    raise SummaryError("the summariser returned an empty summary")
                ctx.amend(state.evolve(failures=0))
            except SummaryError as exc:
                result = await _after_failure(ctx, summarizer, request, exc)
        if result is None:
            return
        reference = ctx.reference(ctx.transcript[first:cursor])
        summary = Summary(result.text, cursor, result.data, result.method, reference)
        removed = ctx.offload(covered)
        ctx.propose(self.name, ctx.state.evolve(summary=summary), span=(start, cursor), references=(removed,))


def _needed(ctx: PassContext) -> bool:
    """Forced; AgentScope (trigger ratio set): over the target; DB-GPT: at the error threshold."""
    if ctx.forced:
        return True
    if ctx.config.trigger_ratio is not None:
        return ctx.tokens > ctx.target
    error_tokens = ctx.budget.tokens_at(ctx.config.error_threshold)
    return error_tokens is not None and ctx.tokens >= error_tokens


def _summary_cursor(ctx: PassContext, start: int) -> int:
    """Where the summary ends: before the newest rounds that hold the kept recent tokens (and rounds)."""
    rounds, cursor = ctx.rounds, ctx.protect
    candidates = [r for r in droppable_rounds(rounds, max(ctx.state.cut, start)) if r.start < cursor]
    sizes = ctx.round_tokens(candidates)
    kept = sum(ctx.round_tokens([r for r in rounds if r.start >= cursor]))
    keep_tokens = ctx.keep_tokens()
    # Walk back from the protected rounds while the recent part is still short of its token floor.
    for r, size in zip(reversed(candidates), reversed(sizes), strict=True):
        if kept >= keep_tokens:
            break
        kept += size
        cursor = r.start
    return cursor


async def _after_failure(
    ctx: PassContext, summarizer: Summarizer, request: SummaryRequest, exc: SummaryError | None
) -> SummaryResult | None:
    """Count a failure (`exc`, or None when the open breaker skipped the call), then apply the strategy.

    Returns the fallback's summary, or None when the view stays as it is.
    """
    state, config = ctx.state, ctx.config
    strategy, fallback = config.compression_failure_strategy, ctx.resources.fallback
    if exc is None:
        failures, breaker = state.failures, True
        error = SummaryError(f"circuit breaker open after {failures} consecutive summary failures")
    else:
        failures = state.failures + 1
        breaker = failures >= config.max_compact_failures
        error = exc
    if exc is not None or strategy is FailureStrategy.FAIL:  # an open breaker's fallback is no news
        reason = "summary_failed" if exc is not None else "breaker_open"
        ctx.outcome.failures.append(
            CompressionFailed(
                conversation_id=ctx.conversation_id,
                layer=str(LayerName.SUMMARY),
                compression_reason=ctx.reason,
                error=str(error),
                reason=reason,
                consecutive_failures=failures,
                breaker_open=breaker,
            )
        )
    ctx.amend(state.evolve(failures=failures, breaker_open=breaker))
    if strategy is FailureStrategy.FAIL:
        ctx.outcome.error = error
        return None
    if strategy is FailureStrategy.USE_ORIGINAL or fallback is None or summarizer is fallback:
        return None
    return await _timed_summary(ctx, fallback, request)


async def _timed_summary(ctx: PassContext, summarizer: Summarizer, request: SummaryRequest) -> SummaryResult:
    """Summarise, adding to the outcome the time it took and the part the summariser itself ran.

    That part is this thread's CPU time over the call, at most the time it did not report as
    waiting for its model (`SummaryResult.wait_seconds`: other tasks run on the loop meanwhile).
    The rest is waiting, for the model or for the CPU (a summariser that reports no wait, or
    fails, waited for whatever it awaited).
    """
    started, cpu, waited = time.perf_counter(), time.thread_time(), 0.0
    try:
        result = await summarizer.summarize(request)
        waited = result.wait_seconds
        return result
    finally:
        took, cpu = time.perf_counter() - started, time.thread_time() - cpu
        ctx.outcome.summary_seconds += took
        ctx.outcome.summary_cpu_seconds += max(min(cpu, took - waited), 0.0)
