"""pydantic-ai: a capability that sends the model contextkeep's view, never touching the run's history.

```python
from pydantic_ai import Agent
from contextkeep.integrations.pydantic_ai import ContextKeepCapability

agent = Agent(model, capabilities=[ContextKeepCapability(cm, conversation_id="ticket-1001")])
```

Before every attempt at a model request (`prepare_model_request`), the request's messages are
converted, synced into the conversation's transcript (`Session.sync` appends only what is new),
and replaced, for that attempt only, by the prepared view mapped back onto pydantic-ai objects:
the messages and parts the view leaves as they were are the run's own objects (thinking
signatures and provider details survive), masked or made ones are new parts. The run's history
(`ctx.messages`, `result.all_messages()`) stays whole. Tool definitions and instructions from
`model_request_parameters` count in the budget; each response is recorded with its `usage`
(the confirmed baseline). A provider's context overflow reaches `on_model_request_error`, which
compacts (layer 4) and asks for another attempt (`RetryModelRequest`), at most
`max_token_limit_recovery_attempts` times per request. Needs `pydantic-ai-slim>=2.68`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelContextWindowExceededError, RetryModelRequest
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext

from contextkeep._errors import ConfigError, ContextOverflowError, OverflowPhase
from contextkeep._events import EventBus, RecoveryFailed, RecoveryStarted, RecoverySucceeded
from contextkeep._manager import ContextManager
from contextkeep._session import Session
from contextkeep._view import View
from contextkeep.integrations._bridge import Origins, unchanged
from contextkeep.integrations._pydantic_ai_messages import (
    Converter,
    Origin,
    instructions_of,
    reply_message,
    tool_dicts,
    usage_of,
)
from contextkeep.models.overflow import classify_exception

__all__ = ["ContextKeepCapability"]


_Recovery = TypeVar("_Recovery", RecoveryStarted, RecoveryFailed)


@dataclass
class _Conversation:
    """One conversation's session and what the capability keeps about its requests."""

    session: Session
    origins: Origins[Origin] = field(default_factory=Origins)
    converter: Converter = field(default_factory=Converter)
    last_view: View | None = None
    run_id: str | None = None
    """The run of the latest request: a new run's history may be a copy (loaded again)."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int | None = None
    recoveries: int = 0
    """Compact-and-retry attempts made for the current request."""
    tokens_before: int = 0
    """View tokens of the attempt that overflowed."""

    async def recover(self, overflow: ContextOverflowError, events: EventBus) -> bool:
        """Layer 4 for the current request: whether it compacted (the request is then attempted again)."""
        config = self.session.config
        self.recoveries += 1
        self.tokens_before = self.last_view.tokens if self.last_view is not None else 0

        def about(event: type[_Recovery], **more: Any) -> _Recovery:
            return event(
                conversation_id=self.session.conversation_id,
                attempt=self.recoveries,
                phase=overflow.phase.value,
                limit=overflow.limit,
                requested=overflow.requested,
                **more,
            )

        allowed = (
            config.compress_on_token_limit_exceeded
            and self.recoveries <= config.max_token_limit_recovery_attempts
        )
        if not overflow.recoverable or not allowed:
            reason = "not_recoverable" if not overflow.recoverable else "attempts_exhausted"
            await events.aemit(about(RecoveryFailed, reason=reason))
            return False
        await events.aemit(about(RecoveryStarted))
        try:
            await self.session.recover(overflow, tools=self.tools, max_tokens=self.max_tokens)
        except ContextOverflowError:
            await events.aemit(about(RecoveryFailed, reason="nothing_to_compact"))
            return False
        return True


class ContextKeepCapability(AbstractCapability[Any]):
    """Keeps every model request of an agent inside the model's context window.

    Args:
        manager: The context manager (model, store, workspace, tokenizer, config).
        conversation_id: The transcript the runs continue; without it, each run's own
            `conversation_id` (pydantic-ai's `run(..., conversation_id=...)`, else the history's).
        fork: A history that does not continue the transcript (edited, or another branch)
            continues in a transcript of its own instead of raising `HistoryDivergedError`.
    """

    def __init__(
        self, manager: ContextManager, *, conversation_id: str | None = None, fork: bool = False
    ) -> None:
        super().__init__()
        self.manager = manager
        """The context manager the sessions are opened on."""
        self.conversation_id = conversation_id
        """The fixed conversation id, or None to follow each run's."""
        self.fork = fork
        """Whether a diverging history forks a new transcript (else it raises)."""
        self._conversations: dict[str, _Conversation] = {}
        self._last_view: View | None = None

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not spec-serializable: it holds a live `ContextManager`."""
        return None

    @property
    def last_view(self) -> View | None:
        """The view sent with the latest request (tokens, status, the layers that ran), if any."""
        return self._last_view

    async def session(self, conversation_id: str | None = None) -> Session:
        """The session of a conversation (this capability's fixed one by default), opened if needed."""
        cid = conversation_id or self.conversation_id
        if cid is None:
            raise ConfigError("conversation_id", "this capability follows each run's: name the conversation")
        return (await self._conversation(cid)).session

    async def _conversation(self, conversation_id: str) -> _Conversation:
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            session = self.manager.new_session(conversation_id)
            await session.load()
            conversation = self._conversations[conversation_id] = _Conversation(session)
        return conversation

    def _id(self, ctx: RunContext[Any]) -> str:
        cid = self.conversation_id or ctx.conversation_id
        if cid is None:
            raise ConfigError("conversation_id", "the run has none: give ContextKeepCapability one")
        return cid

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Sync the request's history, prepare the view, and send it (this attempt only)."""
        conversation = await self._conversation(self._id(ctx))
        parameters = request_context.model_request_parameters
        settings = request_context.model_settings or {}
        history = request_context.messages
        tools = unchanged(conversation.tools, tool_dicts(parameters))
        if request_context.attempt == 1:
            conversation.recoveries = 0
        if conversation.run_id != ctx.run_id:  # its history's own objects, found again by `sync`
            conversation.run_id, conversation.origins = ctx.run_id, Origins()
        await conversation.origins.sync(
            conversation.session,
            conversation.converter.convert(history),
            tools=tools,
            instructions=instructions_of(history, parameters),
            fork=self.fork,
        )
        max_tokens = settings.get("max_tokens")
        view = await conversation.session.prepare(tools=tools, max_tokens=max_tokens)
        conversation.last_view, conversation.tools, conversation.max_tokens = view, tools, max_tokens
        self._last_view = view
        request_context.messages = conversation.converter.from_view(
            conversation.origins.map_view(conversation.session, view)
        )
        return request_context

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        """Record the response and its usage (the provider-confirmed baseline)."""
        conversation = self._conversations.get(self._id(ctx))
        if conversation is None:  # a request another capability answered before ours prepared it
            return response
        await conversation.origins.record(
            conversation.session, reply_message(response), Origin(response), usage_of(response)
        )
        if conversation.recoveries and conversation.last_view is not None:
            await self.manager.events.aemit(
                RecoverySucceeded(
                    conversation_id=conversation.session.conversation_id,
                    attempt=conversation.recoveries,
                    tokens_before=conversation.tokens_before,
                    tokens_after=conversation.last_view.tokens,
                )
            )
        return response

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> ModelResponse:
        """Layer 4: after a provider's context overflow, compact and attempt the request again."""
        conversation = self._conversations.get(self._id(ctx))
        overflow = _overflow(error)
        if (
            conversation is None
            or overflow is None
            or not await conversation.recover(overflow, self.manager.events)
        ):
            raise error
        raise RetryModelRequest() from error


def _overflow(error: Exception) -> ContextOverflowError | None:
    """The overflow a model error reports: by its status and body, else by pydantic-ai's own category."""
    overflow = classify_exception(error)
    if overflow is None and isinstance(error, ModelContextWindowExceededError):
        overflow = ContextOverflowError(str(error), phase=OverflowPhase.INPUT_CONTEXT)
        overflow.__cause__ = error
    return overflow
