"""Google ADK: a plugin that keeps every model request inside the context window.

```python
from google.adk.apps import App
from contextkeep.integrations.adk import ContextKeepPlugin

app = App(name="my_app", root_agent=agent, plugins=[ContextKeepPlugin(cm)])
```

View-only: ADK's session events stay whole. Before each model call the plugin converts the
request's contents (plus its system instruction and function declarations, which are counted)
to messages, `Session.sync`s them (only what is new is appended), prepares the view and puts it
back into `llm_request.contents`: the request's own `Content` objects where the view left them,
new ones where it masked, cut or summarised. After the call it records the reply and its
`usage_metadata`, so provider-confirmed usage sets the baseline. After a provider overflow,
the error callback compacts (layer 4) and calls the model again itself: ADK lets an error
callback return a replacement response but not retry, so the replacement is the retry's own.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import aclosing
from functools import partial
from typing import Any, TypeVar

from google.adk.agents import BaseAgent, LlmAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.readonly_context import ReadonlyContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types

from contextkeep._continuation import with_stable_ids
from contextkeep._errors import ContextOverflowError
from contextkeep._events import EventBus, RecoveryFailed, RecoveryStarted, RecoverySucceeded
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._session import Session
from contextkeep._usage import Usage
from contextkeep._view import View
from contextkeep.integrations._adk_contents import (
    Converted,
    History,
    instructions_of,
    message_of,
    request_scoped,
    tools_of,
)
from contextkeep.integrations._adk_view import Rebuilt
from contextkeep.integrations._bridge import unchanged
from contextkeep.models.overflow import classify_exception

__all__ = ["ContextKeepPlugin", "default_conversation_id", "to_messages", "usage_of"]

_log = logging.getLogger("contextkeep.integrations")

_Recovery = TypeVar("_Recovery", RecoveryStarted, RecoverySucceeded, RecoveryFailed)

ConversationId = Callable[[CallbackContext], str]
"""Names the contextkeep conversation of a model call."""


def default_conversation_id(context: CallbackContext) -> str:
    """The ADK session id; a sub-agent (which sees its own history) gets `"{session id}/{agent}"`."""
    agent = context.get_invocation_context().agent
    if isinstance(agent, BaseAgent) and agent.parent_agent is not None:
        return f"{context.session.id}/{agent.name}"
    return context.session.id


def to_messages(contents: Sequence[types.Content]) -> list[Message]:
    """ADK contents (a request's, or session events') as the messages the plugin syncs."""
    return History().convert(contents).messages


def usage_of(metadata: types.GenerateContentResponseUsageMetadata | None) -> Usage | None:
    """An ADK response's `usage_metadata` as `Usage` (thoughts are output, tool-use prompts input)."""
    if metadata is None:
        return None
    prompt, tool_use = metadata.prompt_token_count, metadata.tool_use_prompt_token_count
    candidates, thoughts = metadata.candidates_token_count, metadata.thoughts_token_count
    return Usage(
        input_tokens=None if prompt is None else prompt + (tool_use or 0),
        output_tokens=None
        if candidates is None and thoughts is None
        else (candidates or 0) + (thoughts or 0),
        total_tokens=metadata.total_token_count,
        cached_tokens=metadata.cached_content_token_count,
    )


class _Conversation:
    """One contextkeep session, and the request contents it last synced."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.history = History()
        self.rebuilt = Rebuilt()
        self.synced = Converted([], [], [])
        self.tools: list[dict[str, object]] | None = None
        self.max_tokens: int | None = None
        self.tokens = 0
        """The local count of the view last sent."""
        self.prepared = False
        """Whether the request now at the model was prepared here (its reply is then recorded)."""
        self.scoped: list[tuple[types.Content, int]] = []
        """The request's own contents (not history), each with how many history contents follow it."""

    async def prepare(self, request: LlmRequest, scoped: Sequence[int], *, fork: bool) -> None:
        """Sync the request's history, prepare the view and put it into the request.

        `scoped` are the indexes of contents that belong to this request only (ADK's dynamic
        instruction beside a `static_instruction`, preloaded memory): they are counted like the
        system instruction, kept out of the transcript, and put back where they were.
        """
        config = request.config
        self.prepared = False
        self.tools, self.max_tokens = unchanged(self.tools, tools_of(config)), config.max_output_tokens
        contents = request.contents
        history = [c for i, c in enumerate(contents) if i not in scoped] if scoped else contents
        self.scoped = [(contents[i], len(contents) - i - 1 - sum(j > i for j in scoped)) for i in scoped]
        self.synced = self.history.convert(history)
        outside = [instructions_of(config), *(instructions_of(c) for c, _ in self.scoped)]
        instructions = "\n\n".join(text for text in outside if text) or None
        await self.session.sync(self.synced.messages, tools=self.tools, instructions=instructions, fork=fork)
        self.apply(request, await self.session.prepare(tools=self.tools, max_tokens=self.max_tokens))
        self.prepared = True

    def apply(self, request: LlmRequest, view: View) -> None:
        """Replace the request's contents with `view`, on the request's own objects where unchanged."""
        self.tokens = view.tokens
        contents = self.rebuilt.contents(view.neutral, self.session.transcript, self.synced)
        for content, after in self.scoped:
            contents.insert(len(contents) - after, content)
        request.contents = contents

    async def record(self, response: LlmResponse) -> None:
        """Append the reply, with the call ids the next sync derives for it, and its usage."""
        # ADK made the request's contents for this call alone: held until the next one, each
        # call's copies would outlive a collection and bring the costly full collections sooner.
        self.synced = self.synced._replace(contents=())
        if not self.prepared or response.content is None or not response.content.parts:
            return
        self.prepared = False
        (reply,) = with_stable_ids([message_of(response.content)], start=len(self.synced.messages))
        await self.session.record(reply, usage_of(response.usage_metadata))

    async def recover(
        self, context: CallbackContext, request: LlmRequest, error: Exception, events: EventBus
    ) -> LlmResponse | None:
        """Compact after a provider overflow and call the model again, a bounded number of times.

        None when the error is not a recoverable overflow, nothing is left to compact or the
        retries failed too: ADK then raises the original error (after the agent's own error
        callbacks); an error a plugin raised would reach the caller wrapped in a `RuntimeError`.
        Each attempt is reported on `events` (`model.recovery.*`).
        """
        config = self.session.config
        limit = config.max_token_limit_recovery_attempts if config.compress_on_token_limit_exceeded else 0
        failure: Exception = error
        attempt = 0
        while (overflow := classify_exception(failure)) is not None:
            attempt += 1
            about = partial(self._event, attempt=attempt, overflow=overflow)
            if not overflow.recoverable or attempt > limit:
                reason = "not_recoverable" if not overflow.recoverable else "attempts_exhausted"
                await events.aemit(about(RecoveryFailed, reason=reason))
                return None
            await events.aemit(about(RecoveryStarted))
            before = self.tokens
            try:
                view = await self.session.recover(overflow, tools=self.tools, max_tokens=self.max_tokens)
            except ContextOverflowError:
                await events.aemit(about(RecoveryFailed, reason="nothing_to_compact"))
                return None
            self.apply(request, view)
            try:
                response = await _call_again(context, request)
            except Exception as again:  # the retry's own error decides whether to go on
                _log.warning("retry %d after an overflow failed: %s", attempt, again)
                failure = again
                continue
            await events.aemit(about(RecoverySucceeded, tokens_before=before, tokens_after=view.tokens))
            return response
        return None

    def _event(
        self, event: type[_Recovery], *, attempt: int, overflow: ContextOverflowError, **more: Any
    ) -> _Recovery:
        return event(
            conversation_id=self.session.conversation_id,
            attempt=attempt,
            phase=overflow.phase.value,
            limit=overflow.limit,
            requested=overflow.requested,
            **more,
        )


def _scopes(invocation: InvocationContext) -> bool:
    """Whether ADK puts request-scoped contents into this agent's requests."""
    agent, run_config = invocation.agent, invocation.run_config
    if run_config is not None and run_config.model_input_context:
        return True
    if not isinstance(agent, LlmAgent):
        return False
    dynamic = bool(
        agent.static_instruction and agent.instruction
    )  # the instruction then goes to the contents
    return dynamic or any(isinstance(tool, PreloadMemoryTool) for tool in agent.tools)


async def _call_again(context: CallbackContext, request: LlmRequest) -> LlmResponse:
    """Call the agent's model with `request`, counted against ADK's `max_llm_calls`; its final response."""
    invocation = context.get_invocation_context()
    agent = invocation.agent
    if not isinstance(agent, LlmAgent):
        raise TypeError(f"model calls come from an LlmAgent, not {type(agent).__name__}")
    llm = await agent.canonical_model_async(ReadonlyContext(invocation))
    invocation.increment_llm_call_count()
    final: LlmResponse | None = None
    async with aclosing(llm.generate_content_async(request, stream=False)) as responses:
        async for response in responses:
            final = response
    if final is None:
        raise RuntimeError(f"{llm.model} returned no response")
    return final


class ContextKeepPlugin(BasePlugin):
    """An ADK plugin: every model request of the runner's agents is a contextkeep view.

    Args:
        manager: The context manager (model, store, workspace, tokenizer).
        conversation_id: Names the conversation of a call; by default the ADK session id
            (`default_conversation_id`).
        fork: When ADK's history does not continue the transcript, continue in a transcript of
            its own (named from the history, so a restarted process forks into the same one);
            False raises `HistoryDivergedError` instead. ADK rewrites history after a failed tool
            call (it drops the call left without a result), a rewind, or its own compaction.
        name: The plugin's name in the runner.
        max_conversations: Sessions kept open (least recently used first out); a closed one
            is loaded from the store again when its ADK session comes back.
    """

    def __init__(
        self,
        manager: ContextManager,
        *,
        conversation_id: ConversationId = default_conversation_id,
        fork: bool = True,
        name: str = "contextkeep",
        max_conversations: int = 256,
    ) -> None:
        super().__init__(name=name)
        self.manager = manager
        """The context manager the sessions come from."""
        self.conversation_id = conversation_id
        """Names the conversation of a call."""
        self.fork = fork
        """Fork a diverging history instead of raising."""
        self.max_conversations = max_conversations
        """Sessions kept open."""
        self._open: OrderedDict[str, _Conversation] = OrderedDict()

    async def session(self, conversation_id: str) -> Session:
        """The session of a conversation (an ADK session id), as the plugin uses it.

        After a fork it is the fork's (`Session.conversation_id` names it). A conversation the
        plugin has not opened is loaded from the store.
        """
        return (await self._conversation(conversation_id)).session

    async def _conversation(self, conversation_id: str) -> _Conversation:
        conversation = self._open.get(conversation_id)
        if conversation is None:
            session = self.manager.new_session(conversation_id)
            await session.load()
            conversation = self._open[conversation_id] = _Conversation(session)
            while len(self._open) > self.max_conversations:
                self._open.popitem(last=False)
        self._open.move_to_end(conversation_id)
        return conversation

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Sync the request's history and replace its contents with the prepared view."""
        invocation = callback_context.get_invocation_context()
        agent = invocation.agent
        if isinstance(agent, LlmAgent) and agent.include_contents == "none":
            return None  # the request holds the current turn only: nothing to keep in the window
        scoped = request_scoped(llm_request.contents, invocation.user_content) if _scopes(invocation) else []
        conversation = await self._conversation(self.conversation_id(callback_context))
        await conversation.prepare(llm_request, scoped, fork=self.fork)
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """Record the final response and its usage (streamed partial chunks are skipped)."""
        conversation = self._open.get(self.conversation_id(callback_context))
        if conversation is not None and not llm_response.partial:
            await conversation.record(llm_response)
        return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        """After a provider overflow: compact, call the model again and return its response."""
        conversation = self._open.get(self.conversation_id(callback_context))
        if conversation is None:
            return None
        return await conversation.recover(callback_context, llm_request, error, self.manager.events)
