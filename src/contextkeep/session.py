"""The per-conversation engine: add → prepare → record → recover.

A :class:`Session` holds one conversation's transcript (append-only), its
compaction state and the caches that make each call cheap. Every change is
written to the store with compare-and-set; offloads happen before the state that
references them is saved, so a crash at any point leaves a state from which the
next `prepare` builds a valid view.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from contextkeep._ingest import Ingest, as_messages, reply_message
from contextkeep.baseline import USAGE_DOCUMENT, UsageState, figures, observe_usage, scope_key
from contextkeep.budget import Budget, resolve_reserved_output
from contextkeep.compaction.builder import ViewBuilder
from contextkeep.compaction.pipeline import Compactor, Outcome
from contextkeep.compaction.state import CompactionState, ProgressStep
from contextkeep.config import ContextConfig, UsageMode
from contextkeep.errors import ConfigError, ContextOverflowError, MaxIterationsError, StoreError
from contextkeep.events import (
    CompressionCompleted,
    CompressionRequired,
    CompressionStarted,
    ContextOffloaded,
    ContextStatus,
    HistoryRepaired,
    ModelCompleted,
    RecoveryFailed,
    RecoveryStarted,
    RecoverySucceeded,
    StoreConflict,
)
from contextkeep.messages import Message
from contextkeep.models.adapter import ModelAdapter, ModelReply
from contextkeep.models.overflow import classify_exception
from contextkeep.offload.snapshot import ActionSnapshot
from contextkeep.rounds import RoundTracker, append_repaired
from contextkeep.stores.base import reporting_failure
from contextkeep.tokens import CalibratingCounter, CountSource
from contextkeep.usage import Usage
from contextkeep.view import View

if TYPE_CHECKING:
    from contextkeep.manager import ContextManager

__all__ = ["Session"]

logger = logging.getLogger("contextkeep.session")

_COMPACTION = "compaction"
_CAS_ATTEMPTS = 24


async def _after_conflict(attempt: int) -> None:
    """Jittered exponential backoff: two instances retrying in lockstep would keep colliding."""
    await asyncio.sleep(random.uniform(0, min(0.002 * 2**attempt, 0.25)))


Tools = Sequence[Mapping[str, Any]] | None
_Recovery = TypeVar("_Recovery", RecoveryStarted, RecoveryFailed)


class Session:
    """One conversation. Obtain it from `ContextManager.session(conversation_id)`."""

    def __init__(
        self,
        manager: ContextManager,
        conversation_id: str,
        *,
        agent_id: str = "default",
        agent_version: str = "0",
    ) -> None:
        self.manager = manager
        self.conversation_id = conversation_id
        self.scope = scope_key(agent_id, agent_version, manager.model.key)
        self.config = manager.config
        self.counter = manager.new_counter()
        self._transcript: list[Message] = []
        self._answered: set[str] = set()  # call ids that already have a result
        self._tracker = RoundTracker()
        self._state = CompactionState()
        self._builder = ViewBuilder(self.config, self.counter, manager.hooks, manager.model.context_window)
        if "L1" in self.config.layers:  # masking will swap previews in: count them ahead
            self.counter.stand_in = self._builder.masked_shadow
        self._compactor = Compactor(
            self.config,
            self.counter,
            self._builder,
            lambda ms: manager.workspace.context_ref(conversation_id, ms),
            summarizer=manager.summarizer,
            fallback=manager.fallback_summarizer,
            conversation_id=conversation_id,
            status_context={"model_key": manager.model.key},
        )
        self.last_usage: Usage | None = None
        self._ingest = Ingest(
            manager.workspace,
            conversation_id,
            self.config,
            self.counter,
            lambda m: self._builder._derive(m, len(self._transcript), CompactionState()),
            self._emit,
        )
        self._usage = UsageState()
        self._max_tokens: int | None = None
        self._tools: tuple[Tools] | None = None
        """The tools of the last `prepare` (None before the first): what counting ahead counts with."""
        self._owner = uuid.uuid4().hex  # lease owner: this session object
        self.model_calls = 0
        self._recovered_from = 0
        """Model calls made through `complete` (each recovery retry counts)."""

    # Reading.
    @property
    def transcript(self) -> Sequence[Message]:
        """Every message, in order, exactly as added (never edited)."""
        return tuple(self._transcript)

    @property
    def state(self) -> CompactionState:
        """The current compaction state."""
        return self._state

    async def load(self) -> None:
        """Catch up with the store: new messages, and the state if another instance changed it.

        The `on_system_prompt` hooks then run (async ones awaited) for the views built until the next.
        """
        store = self.manager.store
        fresh = await store.load_messages(self.conversation_id, after=len(self._transcript))
        for m in fresh:
            self._tracker.append(m)
        self._extend(fresh)
        doc = await store.load_document(self.conversation_id, _COMPACTION)
        if doc.version != self._state.version:
            self._state = CompactionState.from_dict({**doc.data, "version": doc.version})
        usage = await store.load_document(self.conversation_id, USAGE_DOCUMENT, self.scope)
        if usage.version != self._usage.version:
            self._usage = UsageState.from_dict(usage.data, usage.version)
        await self._builder.resolve_system(self._transcript, self._tracker.rounds, self._state)

    def _extend(self, messages: Sequence[Message]) -> None:
        self._transcript.extend(messages)
        self._answered.update(m.tool_call_id for m in messages if m.role == "tool" and m.tool_call_id)

    # Adding.
    async def add(
        self, messages: Iterable[Message | Mapping[str, Any]] | Message | Mapping[str, Any]
    ) -> list[Message]:
        """Validate and append messages (OpenAI dicts or `Message`s); returns them as stored.

        A malformed history raises `MalformedHistoryError` (nothing is stored), unless
        the configured repair policy fixes it; each repair is reported as an event.
        """
        batch = as_messages(messages)
        for attempt in range(_CAS_ATTEMPTS):
            tracker = self._tracker.copy()
            accepted, repairs = append_repaired(tracker, batch, self.config.repair_policy)
            base = len(self._transcript)
            stamped = [m if m.id else _with_id(m, f"m{base + i:06d}") for i, m in enumerate(accepted)]
            answered = set(self._answered)
            stamped = [await self._ingest.message(m, answered) for m in stamped]
            store = self.manager.store
            append = store.append(self.conversation_id, stamped, expected_length=base)
            if await reporting_failure(store, "transcript", append, self._aemit):
                self._tracker = tracker
                self._extend(stamped)
                for r in repairs:
                    self._emit(HistoryRepaired(kind=r.kind, message_id=r.message_id, action=r.action))
                if self._tools is not None:
                    asyncio.get_running_loop().call_soon(self._count_ahead, self._tools[0])
                return stamped
            self._emit(StoreConflict(kind="transcript"))
            await _after_conflict(attempt)
            await self.load()  # another instance appended first: validate again on top of its messages
        raise StoreError(f"could not append to {self.conversation_id!r}: the transcript kept changing")

    # Preparing.
    def budget(self, max_tokens: int | None = None) -> Budget:
        """The budget of the next call (`max_tokens` is the request's, if any)."""
        reserved, _ = resolve_reserved_output(
            self.config.reserved_tokens,
            max_tokens,
            self.manager.default_max_tokens,
            self.manager.model.max_output_tokens,
        )
        capacity = self.manager.capacity(self.config)
        return Budget(capacity.window, reserved, self.config.thresholds(), capacity.source)

    def _trigger(self, budget: Budget) -> int | None:
        if self.config.trigger_ratio is not None and budget.context_window is not None:
            return int(self.config.trigger_ratio * budget.context_window)
        return budget.tokens_at(self.config.warning_threshold)

    async def prepare(self, *, tools: Tools = None, max_tokens: int | None = None) -> View:
        """The view for the next model call, compacted first if a deferred flag or the budget says so.

        A pending `compression_required` flag (set from confirmed usage) is consumed first;
        then, unless in confirmed-only mode, the local count decides.
        """
        await self.load()
        self._tracker.require_complete()
        self._max_tokens, self._tools = max_tokens, (tools,)
        budget = self.budget(max_tokens)
        view, tokens = self._compactor.measure(self._transcript, self._tracker.rounds, self._state, tools)
        trigger, target = self._trigger(budget), budget.tokens_at(self.config.target_ratio)
        mode = self.config.usage_mode
        confirmed_only = mode is UsageMode.CONFIRMED_ONLY
        # DB-GPT: a status after every count, then one after every layer that runs.
        status = self._confirmed_status(budget) if confirmed_only else self._status(tokens, budget)
        self._emit(status)
        layers: list[str] = []
        if target is not None:
            if self._state.compression_required and mode is not UsageMode.LOCAL_ONLY:
                reason = self._state.compression_reason or "THRESHOLD_REACHED"
                outcome = await self._compact(budget, tools, reason, target, force=True)
                view, tokens = outcome.view, outcome.tokens
                layers += (s.compact_layer or "" for s in outcome.statuses)
            if not confirmed_only and trigger is not None and tokens >= trigger:
                outcome = await self._compact(budget, tools, "BUDGET", target)
                view, tokens = outcome.view, outcome.tokens
                layers += (s.compact_layer or "" for s in outcome.statuses)
        if layers:
            status = self._confirmed_status(budget) if confirmed_only else self._status(tokens, budget)
        if self.counter.stand_in is not None:
            # Count masked previews ahead while the caller waits for the model, not before it calls.
            asyncio.get_running_loop().call_soon(self.counter.warm)
        return View(view, tokens, status, tuple(layers))

    def _count_ahead(self, tools: Tools) -> None:
        """Count what was just added while the caller is busy (running the tools a model asked for).

        Counts are cached, so the next `prepare` only checks them; when it comes first, this
        finds nothing left to count.
        """
        try:
            self._compactor.measure(self._transcript, self._tracker.rounds, self._state, tools)
        except Exception:  # the same error reaches the caller from prepare(), which can act on it
            logger.debug("%s: counting ahead failed", self.conversation_id, exc_info=True)

    async def current_view(self, *, tools: Tools = None, max_tokens: int | None = None) -> View:
        """The view as it stands (after catching up with the store): no compaction, no events."""
        await self.load()
        view, tokens = self._compactor.measure(self._transcript, self._tracker.rounds, self._state, tools)
        return View(view, tokens, self._status(tokens, self.budget(max_tokens)))

    async def compress(
        self, *, tools: Tools = None, max_tokens: int | None = None, **override: Any
    ) -> Outcome | None:
        """Compact on demand with optional config overrides; a no-op below the trigger (AgentScope)."""
        config = self.config.merged(**override) if override else self.config
        saved = self.config
        self.config = self._compactor.config = self._builder.config = config
        try:
            budget = self.budget(max_tokens)
            _, tokens = self._compactor.measure(self._transcript, self._tracker.rounds, self._state, tools)
            trigger, target = self._trigger(budget), budget.tokens_at(config.target_ratio)
            if trigger is None or target is None or tokens < trigger:
                return None
            return await self._compact(budget, tools, "MANUAL", target)
        finally:
            self.config = self._compactor.config = self._builder.config = saved

    async def compress_context(
        self,
        context_config: ContextConfig | None = None,
        *,
        tools: Tools = None,
        max_tokens: int | None = None,
    ) -> Outcome | None:
        """AgentScope's `compress_context`: :meth:`compress` with a temporary `ContextConfig`.

        The fields set on `context_config` override the session's config for this call only;
        without one the session's config decides. A no-op (`None`) below the trigger.
        """
        override = context_config.model_dump(exclude_unset=True) if context_config else {}
        return await self.compress(tools=tools, max_tokens=max_tokens, **override)

    async def _compact(
        self,
        budget: Budget,
        tools: Tools,
        reason: str,
        target: int,
        *,
        force: bool = False,
        reactive: bool = False,
    ) -> Outcome:
        """Run the pipeline, offload, then save the state (CAS; on conflict reload and run again).

        A lease keeps two instances from compacting (and paying for a summary) at once:
        the loser waits, reloads, and compacts only if the winner's result is not enough.
        """
        held = await self._acquire_lease()
        try:
            await self.load()  # the previous holder may have compacted already
            # A flag another instance already consumed is not ours to act on again.
            force = force and self._state.compression_required
            return await self._compact_held(budget, tools, reason, target, force=force, reactive=reactive)
        finally:
            if held:
                await self.manager.store.release_lease(self.conversation_id, "compaction", self._owner)

    async def _acquire_lease(self) -> bool:
        """Wait for the compaction lease; after its TTL a silent holder's lease is taken over."""
        ttl = self.config.lease_ttl_ms
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ttl / 1000
        while loop.time() <= deadline:
            if await self.manager.store.acquire_lease(self.conversation_id, "compaction", self._owner, ttl):
                return True
            await asyncio.sleep(0.02)
        return await self.manager.store.acquire_lease(self.conversation_id, "compaction", self._owner, ttl)

    async def _compact_held(
        self,
        budget: Budget,
        tools: Tools,
        reason: str,
        target: int,
        *,
        force: bool,
        reactive: bool,
    ) -> Outcome:
        for attempt in range(_CAS_ATTEMPTS):
            before = self._state
            measured = self._compactor.measure(self._transcript, self._tracker.rounds, before, tools)
            tokens = measured[1]
            await self._aemit(
                CompressionStarted(
                    layer="pipeline",
                    compression_reason=reason,
                    tokens_before=tokens,
                    compression_required=before.compression_required,
                )
            )
            outcome = await self._compactor.run(
                self._transcript,
                self._tracker.rounds,
                before,
                budget=budget,
                tools=tools,
                reason=reason,
                target=target,
                force_summary=force,
                reactive=reactive,
                measured=measured,
            )
            for failure in outcome.failures:
                await self._aemit(failure)
            offload_started = time.perf_counter()
            if outcome.offloads:  # one durable append for the whole pass
                workspace = self.manager.workspace
                removed = [m for span in outcome.offloads for m in span]
                await workspace.offload_context(self.conversation_id, removed)
                for span in outcome.offloads:
                    ref = workspace.context_ref(self.conversation_id, span)
                    await self._aemit(ContextOffloaded(reference=ref, kind="context", messages=len(span)))
            offload_seconds = time.perf_counter() - offload_started
            new = outcome.state.evolve(
                compression_required=False, compression_reason="", compression_required_at=None
            )
            if new == before:
                return _raised(outcome)
            if await self._save(new, before.version):
                if outcome.changed:
                    await self._save_usage(self._usage.invalidated())
                for status in outcome.statuses:
                    await self._aemit(status)
                await self._aemit(
                    CompressionCompleted(
                        usage_status=self._usage.status.value,
                        usage_baseline_valid=self._usage.valid,
                        layer=",".join(s.compact_layer or "" for s in outcome.statuses) or "none",
                        compression_reason=reason,
                        tokens_before=tokens,
                        tokens_after=outcome.tokens,
                        references=tuple(
                            r for rec in new.records[len(before.records) :] for r in rec.references
                        ),
                        layers_ms=outcome.seconds * 1e3,
                        summary_ms=outcome.summary_seconds * 1e3,
                        offload_ms=offload_seconds * 1e3,
                        required_at=before.compression_required_at,
                        into_current_turn=outcome.into_current_turn,
                    )
                )
                outcome.state = self._state
                return _raised(outcome)
            await _after_conflict(attempt)
            await self.load()
        raise StoreError(f"could not save the compaction state of {self.conversation_id!r}: it kept changing")

    async def _save(self, state: CompactionState, expected: int) -> bool:
        data = state.to_dict()
        data.pop("version")
        store = self.manager.store
        save = store.save_document(self.conversation_id, _COMPACTION, data, expected_version=expected)
        ok = await reporting_failure(store, _COMPACTION, save, self._aemit)
        if ok:
            self._state = state.evolve(version=expected + 1)
        else:
            self._emit(StoreConflict(kind="compaction"))
        return ok

    async def update_state(self, change: Callable[[CompactionState], CompactionState]) -> CompactionState:
        """Apply `change` to the current state with compare-and-set; on conflict reload and apply it again."""
        for attempt in range(_CAS_ATTEMPTS):
            if await self._save(change(self._state), self._state.version):
                return self._state
            await _after_conflict(attempt)
            await self.load()
        raise StoreError(f"could not update the state of {self.conversation_id!r}: it kept changing")

    async def reset_breaker(self) -> CompactionState:
        """Close the summary circuit breaker: the next pass calls the summariser again."""
        return await self.update_state(lambda state: state.evolve(failures=0, breaker_open=False))

    # Recording.
    async def record(
        self, reply: ModelReply | Message | Mapping[str, Any] | Any, usage: Usage | None = None
    ) -> Message:
        """Append the model's reply (`ModelReply`, `Message`, OpenAI dict or SDK response) and its usage.

        Complete usage sets the confirmed baseline; when its ratio reaches
        `compression_threshold_ratio`, compaction is scheduled before the next model call.
        """
        message, found = reply_message(reply)
        usage = usage or found or Usage()
        self.last_usage = usage
        self._calibrate(usage)  # before the reply joins the transcript: the view is the prompt it counted
        (stored,) = await self.add([message])
        if self.config.usage_policy_enabled:
            await self._observe(usage)
        return stored

    def _calibrate(self, usage: Usage) -> None:
        """Give a calibrating counter the provider's count of the prompt last prepared."""
        if isinstance(self.counter, CalibratingCounter) and usage.input_tokens and self._tools is not None:
            view = self._builder.build(self._transcript, self._tracker.rounds, self._state)
            self.counter.observe(view, self._tools[0], usage.input_tokens)

    async def _observe(self, usage: Usage) -> None:
        model = self.manager.model
        await self._save_usage(observe_usage(self._usage, usage, model.key))
        budget = self.budget(self._max_tokens)
        numbers = figures(self._usage, budget.context_window, budget.reserved_output)
        threshold = self.config.compression_threshold_ratio
        required = (
            self.config.usage_mode is not UsageMode.LOCAL_ONLY
            and numbers.ratio is not None
            and numbers.ratio >= threshold
        )
        if required and not self._state.compression_required:
            at = time.time()  # persisted with the flag: the latency to its compaction spans restarts
            await self.update_state(
                lambda state: state.evolve(
                    compression_required=True,
                    compression_reason="THRESHOLD_REACHED",
                    compression_required_at=at,
                )
            )
            await self._aemit(
                CompressionRequired(
                    next_call_baseline_tokens=self._usage.baseline, threshold_ratio=threshold, timestamp=at
                )
            )
        await self._aemit(
            ModelCompleted(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
                usage_source=usage.source.value,
                model_key=model.key,
                context_window_tokens=budget.context_window,
                model_max_output_tokens=model.max_output_tokens,
                reserved_output_tokens=budget.reserved_output,
                next_call_baseline_tokens=self._usage.baseline if self._usage.valid else None,
                baseline_ratio=numbers.ratio,
                remaining_baseline_tokens=numbers.remaining,
                compression_required=self._state.compression_required,
                usage_baseline_valid=self._usage.valid,
                usage_status=self._usage.status.value,
            )
        )

    @property
    def usage(self) -> UsageState:
        """The provider-confirmed usage state of this conversation and scope."""
        return self._usage

    async def _save_usage(self, new: UsageState) -> None:
        for attempt in range(_CAS_ATTEMPTS):
            if new == self._usage:
                return
            store = self.manager.store
            save = store.save_document(
                self.conversation_id,
                USAGE_DOCUMENT,
                new.to_dict(),
                expected_version=self._usage.version,
                scope=self.scope,
            )
            if await reporting_failure(store, USAGE_DOCUMENT, save, self._aemit):
                self._usage = replace(new, version=self._usage.version + 1)
                return
            self._emit(StoreConflict(kind="usage"))
            await _after_conflict(attempt)
            await self.load()  # another instance recorded first: its figures are as new as ours
            new = replace(new, version=self._usage.version)
        raise StoreError(f"could not save the usage state of {self.conversation_id!r}: it kept changing")

    # Calling.
    async def complete(
        self,
        adapter: ModelAdapter,
        *,
        tools: Tools = None,
        max_tokens: int | None = None,
        max_calls: int | None = None,
        **options: Any,
    ) -> ModelReply:
        """One model call through the whole cycle: prepare → call → record, recovering from overflow.

        An input or total-context overflow is compacted and the same model retried, at most
        `max_token_limit_recovery_attempts` times; every retry is a model call of its own, and
        `max_calls` (the runner's iterations left) bounds them all: an overflow on the last call
        allowed is raised as `MaxIterationsError` (the overflow its `__cause__`), not retried.
        The adapter gets the view's local count (`local_prompt_tokens`), so a prompt the server
        cut to its window without an error (Ollama) raises as an overflow instead of being recorded.
        Other errors, and overflows that cannot be recovered, reach the caller unchanged.
        """
        if max_calls is not None and max_calls < 1:
            raise ConfigError("max_calls", f"must be at least 1, got {max_calls}")
        view = await self.prepare(tools=tools, max_tokens=max_tokens)
        attempt = 0
        while True:
            self.model_calls += 1
            try:
                reply = await adapter.complete(
                    view.neutral,
                    tools=tools,
                    max_tokens=max_tokens,
                    local_prompt_tokens=view.tokens,
                    **options,
                )
                break
            except ContextOverflowError as error:
                attempt += 1
                view = await self._recover_for_retry(error, attempt, view, tools, max_tokens, max_calls)
        await self.record(reply)
        if attempt:
            await self._aemit(
                RecoverySucceeded(
                    attempt=attempt, tokens_before=self._recovered_from, tokens_after=view.tokens
                )
            )
        return reply

    async def _recover_for_retry(
        self,
        error: ContextOverflowError,
        attempt: int,
        view: View,
        tools: Tools,
        max_tokens: int | None,
        max_calls: int | None,
    ) -> View:
        """The compacted view for retry number `attempt` (also the calls made so far), or raise."""

        def about(event: type[_Recovery], **more: Any) -> _Recovery:
            return event(
                attempt=attempt, phase=error.phase.value, limit=error.limit, requested=error.requested, **more
            )

        limit = self.config.max_token_limit_recovery_attempts
        if not error.recoverable or not self.config.compress_on_token_limit_exceeded or attempt > limit:
            reason = "not_recoverable" if not error.recoverable else "attempts_exhausted"
            await self._aemit(about(RecoveryFailed, reason=reason))
            raise error
        if max_calls is not None and attempt >= max_calls:  # Agents-Flex: a retry is an iteration too
            await self._aemit(about(RecoveryFailed, reason="max_calls_reached"))
            raise MaxIterationsError(
                f"conversation {self.conversation_id!r}: the overflow was not retried, the {max_calls} "
                f"model call(s) allowed were made ({error})"
            ) from error
        await self._aemit(about(RecoveryStarted))
        try:
            recovered = await self.recover(error, tools=tools, max_tokens=max_tokens)
        except ContextOverflowError:
            await self._aemit(about(RecoveryFailed, reason="nothing_to_compact"))
            raise
        self._recovered_from = view.tokens
        return recovered

    # Recovering.
    async def recover(
        self, error: BaseException, *, tools: Tools = None, max_tokens: int | None = None
    ) -> View:
        """Layer 4: compact after a provider overflow so the same call can be retried.

        Raises the original error when it is not an input/total-context overflow or
        nothing can be compacted.
        """
        overflow = error if isinstance(error, ContextOverflowError) else classify_exception(error)
        if overflow is None or not overflow.recoverable:
            raise error
        budget = self.budget(max_tokens)
        _, tokens = self._compactor.measure(self._transcript, self._tracker.rounds, self._state, tools)
        target = self._recovery_target(tokens, overflow)
        outcome = await self._compact(budget, tools, "OVERFLOW_RECOVERY", target, reactive=True)
        if not outcome.changed or outcome.tokens >= tokens:
            raise error
        status = self._status(outcome.tokens, budget)
        self._emit(status)
        return View(
            outcome.view, outcome.tokens, status, tuple(s.compact_layer or "" for s in outcome.statuses)
        )

    def _recovery_target(self, local: int, overflow: ContextOverflowError) -> int:
        margin = self.config.recovery_margin_tokens
        if overflow.limit and overflow.requested and overflow.requested > 0:
            # The provider's count may differ from ours: scale the gap into local tokens.
            return max(int(local * overflow.limit / overflow.requested) - margin, 0)
        return 0  # unknown gap: down to the system prompt and the last two rounds

    # Snapshots and progress.
    async def snapshot(
        self, snapshot: ActionSnapshot | str, payload: Mapping[str, Any] | None = None, *, summary: str = ""
    ) -> str:
        """Write an action snapshot (every DB-GPT field) and record the step in the task progress.

        `snapshot(action, payload)` with a mapping of those fields still works.
        """
        record = (
            snapshot
            if isinstance(snapshot, ActionSnapshot)
            else ActionSnapshot.from_payload(snapshot, payload or {})
        )
        step, ref = await self.manager.workspace.snapshot(self.conversation_id, record)
        done = ProgressStep(step, record.action, summary, ref)
        await self.update_state(lambda state: state.evolve(progress=(*state.progress, done)))
        return ref

    # Events.
    def _confirmed_status(self, budget: Budget) -> ContextStatus:
        """Confirmed-only mode: the status shows the provider's baseline, never a local figure."""
        numbers = figures(self._usage, budget.context_window, budget.reserved_output)
        used = self._usage.baseline if self._usage.valid and self._usage.baseline is not None else 0
        return ContextStatus(
            used=used,
            budget=numbers.usable_input if numbers.ratio is not None else None,
            ratio=numbers.ratio,
            state=budget.thresholds.state(numbers.ratio) if numbers.ratio is not None else None,
            remaining=numbers.remaining,
            source=CountSource.PROVIDER_CONFIRMED,
            conversation_id=self.conversation_id,
            context_window=budget.context_window,
            reserved_output=budget.reserved_output,
            model_key=self.manager.model.key,
            capacity_source=budget.capacity_source.value,
        )

    def _status(self, tokens: int, budget: Budget) -> ContextStatus:
        return ContextStatus.measure(
            tokens,
            budget,
            source=self.counter.source,
            conversation_id=self.conversation_id,
            model_key=self.manager.model.key,
        )

    def _emit(self, event: Any) -> None:
        self.manager.events.emit(_stamp(event, self.conversation_id))

    async def _aemit(self, event: Any) -> None:
        await self.manager.events.aemit(_stamp(event, self.conversation_id))


def _raised(outcome: Outcome) -> Outcome:
    """The outcome, or its summary failure raised (`fail` strategy) now that the state is saved."""
    if outcome.error is not None:
        raise outcome.error
    return outcome


def _stamp(event: Any, conversation_id: str) -> Any:
    if getattr(event, "conversation_id", None) == conversation_id:
        return event
    return replace(event, conversation_id=conversation_id)


def _with_id(m: Message, mid: str) -> Message:
    return replace(m, id=mid)
