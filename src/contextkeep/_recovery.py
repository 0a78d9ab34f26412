"""The model-call cycle: prepare → call → record, and layer 4 after a provider overflow.

An input or total-context overflow is compacted (layer 4, by at least the reported gap) and the
same model retried, a bounded number of times; every retry is a model call of its own. Other
errors, and overflows that cannot be recovered, reach the caller unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from contextkeep._config import ContextConfig
from contextkeep._emitter import Emitter
from contextkeep._errors import ConfigError, ContextOverflowError, MaxIterationsError
from contextkeep._events import RecoveryFailed, RecoveryStarted, RecoverySucceeded
from contextkeep._messages import Message
from contextkeep._view import View
from contextkeep.models.adapter import ModelAdapter, ModelReply

__all__ = ["Engine", "ModelCalls"]

Tools = Sequence[Mapping[str, Any]] | None
_Recovery = TypeVar("_Recovery", RecoveryStarted, RecoveryFailed)


class Engine(Protocol):
    """What the cycle drives: a session's prepare, record and recover."""

    async def prepare(self, *, tools: Tools = None, max_tokens: int | None = None) -> View:
        """The view for the next call."""
        ...

    async def record(self, reply: ModelReply) -> Message:
        """Append the reply and its usage."""
        ...

    async def recover(
        self, error: BaseException, *, tools: Tools = None, max_tokens: int | None = None
    ) -> View:
        """The view compacted after `error` (layer 4), or `error` raised."""
        ...


class ModelCalls:
    """Makes one conversation's model calls, recovering from overflows; counts every call made."""

    def __init__(self, config: ContextConfig, conversation_id: str, events: Emitter) -> None:
        self.config = config
        """Whether and how often an overflow is recovered."""
        self.conversation_id = conversation_id
        """Whose calls they are."""
        self.calls = 0
        """Model calls made through `complete` (each recovery retry counts)."""
        self._events = events

    async def complete(
        self,
        engine: Engine,
        adapter: ModelAdapter,
        *,
        tools: Tools,
        max_tokens: int | None,
        max_calls: int | None,
        options: Mapping[str, Any],
    ) -> ModelReply:
        """One model call through the whole cycle (see `Session.complete`)."""
        if max_calls is not None and max_calls < 1:
            raise ConfigError("max_calls", f"must be at least 1, got {max_calls}")
        view = await engine.prepare(tools=tools, max_tokens=max_tokens)
        attempt, recovered_from = 0, 0
        while True:
            self.calls += 1
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
                attempt, recovered_from = attempt + 1, view.tokens
                view = await self._retry_view(engine, error, attempt, tools, max_tokens, max_calls)
        await engine.record(reply)
        if attempt:
            await self._events.aemit(
                RecoverySucceeded(attempt=attempt, tokens_before=recovered_from, tokens_after=view.tokens)
            )
        return reply

    async def _retry_view(
        self,
        engine: Engine,
        error: ContextOverflowError,
        attempt: int,
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
            await self._events.aemit(about(RecoveryFailed, reason=reason))
            raise error
        if max_calls is not None and attempt >= max_calls:  # Agents-Flex: a retry is an iteration too
            await self._events.aemit(about(RecoveryFailed, reason="max_calls_reached"))
            raise MaxIterationsError(
                f"conversation {self.conversation_id!r}: the overflow was not retried, the {max_calls} "
                f"model call(s) allowed were made ({error})"
            ) from error
        await self._events.aemit(about(RecoveryStarted))
        try:
            return await engine.recover(error, tools=tools, max_tokens=max_tokens)
        except ContextOverflowError:
            await self._events.aemit(about(RecoveryFailed, reason="nothing_to_compact"))
            raise
