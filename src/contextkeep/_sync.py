"""`SyncSession`: the blocking twin of :class:`~contextkeep.Session`, for scripts.

Each method runs its async twin to completion on the session's private event loop, so both
share one engine; every public method of `Session` has a twin here, with the same signature
(a test keeps it that way).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from contextkeep._baseline import UsageState
from contextkeep._budget import Budget
from contextkeep._capabilities import ModelSpec
from contextkeep._compaction import Outcome
from contextkeep._compaction.state import CompactionState
from contextkeep._config import ContextConfig
from contextkeep._messages import Message
from contextkeep._offload.snapshot import ActionSnapshot
from contextkeep._offload.workspace import Workspace
from contextkeep._session import Session, Tools
from contextkeep._tokens import PromptCounter
from contextkeep._usage import Usage
from contextkeep._view import View
from contextkeep.models.adapter import ModelAdapter, ModelReply

__all__ = ["SyncSession"]


class SyncSession:
    """Blocking twin of :class:`~contextkeep.Session` (same engine underneath).

    Obtain it from `ContextManager.sync_session(conversation_id)`.
    """

    def __init__(self, session: Session, runner: asyncio.Runner) -> None:
        self.session = session
        """The async session every call runs on."""
        self._runner = runner

    # Reading.
    @property
    def conversation_id(self) -> str:
        """The conversation's id in the store and the workspace."""
        return self.session.conversation_id

    @property
    def scope(self) -> str:
        """The usage scope: agent id + agent version + model key."""
        return self.session.scope

    @property
    def config(self) -> ContextConfig:
        """The context configuration."""
        return self.session.config

    @property
    def counter(self) -> PromptCounter:
        """The session's token counter."""
        return self.session.counter

    @property
    def last_usage(self) -> Usage | None:
        """The usage of the last recorded reply."""
        return self.session.last_usage

    @property
    def transcript(self) -> Sequence[Message]:
        """Every message, in order, exactly as added (never edited)."""
        return self.session.transcript

    @property
    def state(self) -> CompactionState:
        """The current compaction state."""
        return self.session.state

    @property
    def usage(self) -> UsageState:
        """The provider-confirmed usage state of this conversation and scope."""
        return self.session.usage

    @property
    def model_calls(self) -> int:
        """Model calls made through `complete` (each recovery retry counts)."""
        return self.session.model_calls

    @property
    def model(self) -> ModelSpec:
        """The model the views are prepared for."""
        return self.session.model

    @property
    def workspace(self) -> Workspace:
        """Where whatever leaves the view is offloaded (and read back from)."""
        return self.session.workspace

    def load(self) -> None:
        """Catch up with the store (see `Session.load`)."""
        self._runner.run(self.session.load())

    def flush(self) -> None:
        """Wait until the queued tool-result copies are written (see `Session.flush`)."""
        self._runner.run(self.session.flush())

    # Adding.
    def add(
        self, messages: Iterable[Message | Mapping[str, Any]] | Message | Mapping[str, Any]
    ) -> list[Message]:
        """Validate and append messages; returns them as stored (see `Session.add`)."""
        return self._runner.run(self.session.add(messages))

    def sync(
        self,
        history: Iterable[Message | Mapping[str, Any]],
        *,
        tools: Tools = None,
        instructions: str | None = None,
        fork: bool = False,
    ) -> list[Message]:
        """Append what is new in a whole history (see `Session.sync`)."""
        return self._runner.run(self.session.sync(history, tools=tools, instructions=instructions, fork=fork))

    # Preparing.
    def budget(self, max_tokens: int | None = None) -> Budget:
        """The budget of the next call (see `Session.budget`)."""
        return self.session.budget(max_tokens)

    def prepare(self, *, tools: Tools = None, max_tokens: int | None = None) -> View:
        """The view for the next model call, compacted first if due (see `Session.prepare`)."""
        return self._runner.run(self.session.prepare(tools=tools, max_tokens=max_tokens))

    def current_view(self, *, tools: Tools = None, max_tokens: int | None = None) -> View:
        """The view as it stands, no compaction (see `Session.current_view`)."""
        return self._runner.run(self.session.current_view(tools=tools, max_tokens=max_tokens))

    def compress(
        self, *, tools: Tools = None, max_tokens: int | None = None, **override: Any
    ) -> Outcome | None:
        """Compact on demand with optional config overrides (see `Session.compress`)."""
        return self._runner.run(self.session.compress(tools=tools, max_tokens=max_tokens, **override))

    def compress_context(
        self,
        context_config: ContextConfig | None = None,
        *,
        tools: Tools = None,
        max_tokens: int | None = None,
    ) -> Outcome | None:
        """AgentScope's `compress_context` (see `Session.compress_context`)."""
        return self._runner.run(
            self.session.compress_context(context_config, tools=tools, max_tokens=max_tokens)
        )

    def update_state(self, change: Callable[[CompactionState], CompactionState]) -> CompactionState:
        """Apply `change` to the state with compare-and-set (see `Session.update_state`)."""
        return self._runner.run(self.session.update_state(change))

    def reset_breaker(self) -> CompactionState:
        """Close the summary circuit breaker (see `Session.reset_breaker`)."""
        return self._runner.run(self.session.reset_breaker())

    # Recording.
    def record(
        self, reply: ModelReply | Message | Mapping[str, Any] | Any, usage: Usage | None = None
    ) -> Message:
        """Append the model's reply and its usage (see `Session.record`)."""
        return self._runner.run(self.session.record(reply, usage))

    # Calling.
    def complete(
        self,
        adapter: ModelAdapter,
        *,
        tools: Tools = None,
        max_tokens: int | None = None,
        max_calls: int | None = None,
        **options: Any,
    ) -> ModelReply:
        """One model call through the whole cycle (see `Session.complete`)."""
        return self._runner.run(
            self.session.complete(adapter, tools=tools, max_tokens=max_tokens, max_calls=max_calls, **options)
        )

    # Recovering.
    def recover(self, error: BaseException, *, tools: Tools = None, max_tokens: int | None = None) -> View:
        """Layer 4 after a provider overflow (see `Session.recover`)."""
        return self._runner.run(self.session.recover(error, tools=tools, max_tokens=max_tokens))

    # Snapshots and progress.
    def snapshot(
        self, snapshot: ActionSnapshot | str, payload: Mapping[str, Any] | None = None, *, summary: str = ""
    ) -> str:
        """Write an action snapshot and record the step (see `Session.snapshot`)."""
        return self._runner.run(self.session.snapshot(snapshot, payload, summary=summary))
