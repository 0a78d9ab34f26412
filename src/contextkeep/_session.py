"""The per-conversation engine: add → prepare → record → recover.

A :class:`Session` coordinates the parts it is given, in the order the data flows:
messages (the transcript log) → counts (the counter) → budget → layers (the compaction
pass) → view → model (the call/recover cycle) → usage (the usage policy) → state (the
persisted documents). Every change is written to the store with compare-and-set;
offloads are written before the state or view that references them is, so a crash at any point
leaves a state from which the next `prepare` builds a valid view. Tool-result copies are written
in the background after `add` returns; state saves, reads of them and `flush` wait for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from contextkeep._baseline import UsageState, scope_key
from contextkeep._budget import Budget
from contextkeep._capabilities import ModelSpec
from contextkeep._cas import CompareAndSet
from contextkeep._compacting import Compacting, PassRequest, pass_trigger
from contextkeep._compaction import CompressionReason, LayerName, Outcome
from contextkeep._compaction.builder import ViewBuilder
from contextkeep._compaction.state import CompactionState, ProgressStep
from contextkeep._config import ContextConfig
from contextkeep._continuation import StableIds, first_divergence, fork_id, new_messages
from contextkeep._count_ahead import CountAhead
from contextkeep._deps import SessionDeps
from contextkeep._documents import Documents
from contextkeep._emitter import Emitter
from contextkeep._errors import ContextOverflowError, HistoryDivergedError
from contextkeep._events import HistoryRepaired, ReserveClamped
from contextkeep._gauge import Gauge
from contextkeep._ingest import Ingest, as_messages, reply_message
from contextkeep._messages import Message
from contextkeep._offload.snapshot import ActionSnapshot
from contextkeep._offload.workspace import Workspace
from contextkeep._provider_window import ProviderWindow
from contextkeep._recovery import ModelCalls
from contextkeep._reply_usage import Prepared, ReplyUsage
from contextkeep._transcript import Transcript
from contextkeep._usage import Usage
from contextkeep._usage_policy import UsagePolicy
from contextkeep._validation import check_conversation_id, checked
from contextkeep._view import View, ViewConversions
from contextkeep.models.adapter import ModelAdapter, ModelReply
from contextkeep.models.overflow import classify_exception

__all__ = ["Session", "Tools"]

Tools = Sequence[Mapping[str, Any]] | None
"""Tool definitions sent with a call (OpenAI function-tool dicts), or None."""


class _Synced(NamedTuple):
    """What the last `sync` said travels beside the messages."""

    tools: Tools = None
    outside: int = 0
    """Tokens of the instructions kept outside the messages."""


class Session:
    """One conversation. Obtain it from `ContextManager.session(conversation_id)`."""

    def __init__(
        self, deps: SessionDeps, conversation_id: str, *, agent_id: str = "default", agent_version: str = "0"
    ) -> None:
        self.scope = scope_key(agent_id, agent_version, deps.model.key)
        """The usage scope: agent id + agent version + model key."""
        self.config = deps.config
        """The context configuration (`compress` overrides apply to one call and leave it as it is)."""
        self.last_usage: Usage | None = None
        """The usage of the last recorded reply."""
        self._deps = deps
        self._synced = _Synced()
        self._instructions: tuple[str, Message] | None = None
        """The last `sync`'s instructions, as the system message they are counted as."""
        self._conversions = ViewConversions()  # every view of the session converts incrementally
        self._stable_ids = StableIds()  # so does the history `sync` is handed
        check_conversation_id(conversation_id)  # it names the workspace folder: bounded, no control chars
        self._bind(conversation_id)

    def _bind(self, conversation_id: str) -> None:
        """Build the parts that hold one conversation (again, when a `sync` forks)."""
        deps = self._deps
        self.conversation_id = conversation_id
        """The conversation's id in the store and the workspace."""
        self.counter = deps.new_counter()
        """This session's token counter."""
        self._events = Emitter(deps.events, conversation_id)
        cas = CompareAndSet(deps.store, conversation_id, self.load, self._events)
        self._log = Transcript(deps.store, conversation_id, cas)
        self._docs = Documents(deps.store, conversation_id, self.scope, cas)
        self._window = ProviderWindow(deps.store, conversation_id, deps.model.key, cas, self._events)
        self._builder = ViewBuilder(self.config, self.counter, deps.hooks, deps.model.context_window)
        if LayerName.MASK in self.config.layers:  # masking will swap previews in: count them ahead
            self.counter.stand_in = self._builder.masked_shadow
            self.counter.stand_in_settled = self._builder.shadow_settled
        self._ingest = Ingest(
            deps.workspace,
            conversation_id,
            self.config,
            self.counter,
            lambda m: self._builder.as_added(m, len(self._log)),
            self._events.emit,
        )
        self._policy = UsagePolicy(self.config, deps.model)
        self._passes = Compacting(
            deps,
            counter=self.counter,
            builder=self._builder,
            transcript=self._log,
            documents=self._docs,
            policy=self._policy,
            cas=cas,
            events=self._events,
            load=self._load,
            flush=self._ingest.flush,
        )
        self._gauge = Gauge(deps, self._window, self.counter, self._policy, conversation_id)
        self._replies = ReplyUsage(
            self.counter, self._builder, self._log, self._docs, self._policy, self._events
        )
        self._calls = ModelCalls(self.config, conversation_id, self._events)
        self._ahead = CountAhead(
            self.counter, lambda tools: self._passes.measure(tools, deps.config), conversation_id
        )
        self._prepared: Prepared | None = None

    # Reading.
    @property
    def transcript(self) -> Sequence[Message]:
        """Every message, in order, exactly as added (never edited)."""
        return tuple(self._log.messages)

    @property
    def state(self) -> CompactionState:
        """The current compaction state."""
        return self._docs.compaction

    @property
    def usage(self) -> UsageState:
        """The provider-confirmed usage state of this conversation and scope."""
        return self._docs.usage

    @property
    def model_calls(self) -> int:
        """Model calls made through `complete` (each recovery retry counts)."""
        return self._calls.calls

    @property
    def model(self) -> ModelSpec:
        """The model the views are prepared for."""
        return self._deps.model

    @property
    def workspace(self) -> Workspace:
        """Where whatever leaves the view is offloaded (and read back from)."""
        return self._deps.workspace

    async def load(self) -> None:
        """Catch up with the store: new messages, and the state if another instance changed it.

        The `on_system_prompt` hooks then run (async ones awaited) for the views built until the next.
        """
        await self._load(self.config)

    async def _load(self, config: ContextConfig) -> None:
        """`load`, with the hooks resolved for views built under `config`."""
        known = len(self._log)
        await self._log.catch_up()
        self._ingest.loaded(self._log.messages[known:])
        await self._docs.catch_up()
        await self._window.load()
        await self._builder.resolve_system(self._log.messages, self._log.rounds, self.state, config=config)

    # Adding.
    async def add(
        self, messages: Iterable[Message | Mapping[str, Any]] | Message | Mapping[str, Any]
    ) -> list[Message]:
        """Validate and append messages (OpenAI dicts or `Message`s); returns them as stored.

        A malformed history raises `MalformedHistoryError` (nothing is stored), unless
        the configured repair policy fixes it; each repair is reported as an event. Input that
        cannot be stored (see `contextkeep._validation`) raises `InvalidIdError` or
        `MessageFormatError` naming it, and nothing of the batch is stored either.
        """
        appended = await self._log.append(
            checked(as_messages(messages)), self.config.repair_policy, self._ingest.message
        )
        self._ingest.stored(appended.messages)
        for r in appended.repairs:
            self._events.emit(HistoryRepaired(kind=r.kind, message_id=r.message_id, action=r.action))
        if self._prepared is not None:
            self._ahead.after_append(self._prepared.tools)
        return appended.messages

    async def sync(
        self,
        history: Iterable[Message | Mapping[str, Any]],
        *,
        tools: Tools = None,
        instructions: str | None = None,
        fork: bool = False,
    ) -> list[Message]:
        """Append what is new in a framework's whole history (OpenAI dicts or `Message`s).

        The rule is :mod:`contextkeep._continuation`'s; calls without ids get stable ones.
        A history that does not continue the transcript raises `HistoryDivergedError`
        naming the first differing message, or with `fork` continues in a transcript of its
        own (`conversation_id` then names it). `tools` and `instructions` that travel beside
        the messages are counted in every budget until the next `sync`.
        """
        incoming = as_messages(self._stable_ids(history))
        await self.load()
        new = new_messages(self._log.messages, incoming)
        if new is None:
            at = first_divergence(self._log.messages, incoming)
            if not fork:
                raise HistoryDivergedError(self.conversation_id, at, "differs from the stored one")
            self._bind(fork_id(self.conversation_id, incoming, at))
            await self.load()
            new = new_messages(self._log.messages, incoming) or []
        outside = self.counter.count_message(self._system(instructions)) if instructions else 0
        self._synced = _Synced(tools, outside)
        return await self.add(new) if new else []

    def _system(self, instructions: str) -> Message:
        """`instructions` as a system message, built once while they stay the same (JSON and hash)."""
        if self._instructions is None or self._instructions[0] != instructions:
            self._instructions = (instructions, Message("system", instructions))
        return self._instructions[1]

    # Preparing.
    def budget(self, max_tokens: int | None = None) -> Budget:
        """The budget of the next call (`max_tokens` is the request's, if any)."""
        return self._gauge.budget(max_tokens, self.config, self._synced.outside)

    async def prepare(self, *, tools: Tools = None, max_tokens: int | None = None) -> View:
        """The view for the next model call, compacted first if a deferred flag or the budget says so.

        A pending `compression_required` flag (set from confirmed usage) is consumed first;
        then, unless in confirmed-only mode, the local count decides.
        """
        await self.load()
        self._log.tracker.require_complete()
        tools = self._synced.tools if tools is None else tools
        self._prepared = Prepared(tools, max_tokens)
        config, budget = self.config, self.budget(max_tokens)
        if budget.clamped_from is not None:
            self._events.emit(ReserveClamped.of(budget, self._deps.model.key))
        appended = self._ahead.appended  # what the view counted next includes
        first = self._passes.measure(tools, config)
        # DB-GPT: a status after every count, then one after every layer that runs.
        status = self._gauge.shown(first.tokens, budget, config, self.usage)
        self._events.emit(status)
        view, tokens, layers = await self._passes.due(first, budget, tools, config)
        if layers:
            status = self._gauge.shown(tokens, budget, config, self.usage)
        self._ahead.after_prepare(appended)
        return View(view, tokens, status, layers, self._conversions)

    async def current_view(self, *, tools: Tools = None, max_tokens: int | None = None) -> View:
        """The view as it stands (after catching up with the store): no compaction, no events."""
        await self.load()
        await self._ingest.flush()
        measured = self._passes.measure(tools, self.config)
        status = self._gauge.status(measured.tokens, self.budget(max_tokens))
        return View(measured.view, measured.tokens, status, conversions=self._conversions)

    async def compress(
        self, *, tools: Tools = None, max_tokens: int | None = None, **override: Any
    ) -> Outcome | None:
        """Compact on demand with optional config overrides; a no-op below the trigger (AgentScope).

        The overrides apply to this pass only; the session's `config` stays as it is.
        """
        config = self.config.merged(**override) if override else self.config
        await self._ingest.flush()
        budget = self._gauge.budget(max_tokens, config, self._synced.outside)
        measured = self._passes.measure(tools, config)
        start, target = pass_trigger(budget, config), budget.tokens_at(config.target_ratio)
        if start is None or target is None or measured.tokens < start:
            return None
        return await self._passes.run(
            PassRequest(budget, tools, CompressionReason.MANUAL, target, config), measured
        )

    async def compress_context(
        self,
        context_config: ContextConfig | None = None,
        *,
        tools: Tools = None,
        max_tokens: int | None = None,
    ) -> Outcome | None:
        """AgentScope's `compress_context`: :meth:`compress` with the fields set on `context_config`."""
        override = context_config.model_dump(exclude_unset=True) if context_config else {}
        return await self.compress(tools=tools, max_tokens=max_tokens, **override)

    async def update_state(self, change: Callable[[CompactionState], CompactionState]) -> CompactionState:
        """Apply `change` to the current state with compare-and-set; on conflict reload and apply it again."""
        await self._ingest.flush()
        return await self._docs.update_compaction(change)

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
        self._replies.calibrate(usage, self._prepared)  # before the reply joins the transcript
        # The new usage state is written with the reply (one store write); `observe` then finds it saved.
        saved = self._replies.saved_with_reply(usage) if self.config.usage_policy_enabled else None
        with self._log.saving(saved):
            (stored,) = await self.add([message])
        if saved is not None:
            await self._replies.observe(usage, self._prepared, self.budget, self.update_state, saved)
        return stored

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
        return await self._calls.complete(
            self, adapter, tools=tools, max_tokens=max_tokens, max_calls=max_calls, options=options
        )

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
        if await self._window.learn(overflow, budget):
            budget = self.budget(max_tokens)
        outcome = await self._passes.recover(overflow, budget, tools, self.config)
        if outcome is None:
            raise error
        status = self._gauge.status(outcome.tokens, budget)
        self._events.emit(status)
        return View(outcome.view, outcome.tokens, status, outcome.layers, self._conversions)

    async def flush(self) -> None:
        """Wait until the tool-result copies `add` queued are written (`ContextManager.session` does on exit).

        State saves and reads through this workspace wait for them by themselves; call it
        before reading a reference some other way (another process, the file itself) right after `add`.
        """
        await self._ingest.flush()

    # Snapshots and progress.
    async def snapshot(
        self, snapshot: ActionSnapshot | str, payload: Mapping[str, Any] | None = None, *, summary: str = ""
    ) -> str:
        """Write an action snapshot (every DB-GPT field) and record the step in the task progress.

        `snapshot(action, payload)` with a mapping of those fields still works.
        """
        record = ActionSnapshot.of(snapshot, payload)
        step, ref = await self._deps.workspace.snapshot(self.conversation_id, record)
        done = ProgressStep(step, record.action, summary, ref)
        await self.update_state(lambda state: state.evolve(progress=(*state.progress, done)))
        return ref
