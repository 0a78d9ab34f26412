"""LangChain v1: a middleware that sends the model contextkeep's view, never touching the agent's state.

```python
from langchain.agents import create_agent
from contextkeep.integrations.langchain import ContextKeepMiddleware

agent = create_agent(model, tools, middleware=[ContextKeepMiddleware(cm)])
agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "ticket-1001"}})
```

Around every model call (`wrap_model_call` / `awrap_model_call`), the request's messages are
converted (LangChain's own `convert_to_openai_messages`), synced into the conversation's
transcript (`Session.sync` appends only what is new) and replaced, for that call only, by the
prepared view mapped back onto LangChain messages: the messages the view leaves as they were are
the state's own objects (content blocks, thinking signatures, response metadata survive), masked or
made ones are new messages of the right class. The agent's state (`messages`) stays whole; nothing
runs in `before_model`. The system prompt and the tools count in the budget; each reply's
`usage_metadata` is recorded (the confirmed baseline). A provider's context overflow raised by the
model is compacted (layer 4) and the handler called again, at most
`max_token_limit_recovery_attempts` times; streaming models stream as before (the handler is
LangChain's, the middleware only changes the request).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.messages.tool import invalid_tool_call, tool_call
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.config import get_config

from contextkeep._errors import ContextOverflowError
from contextkeep._formats import from_openai, to_openai
from contextkeep._manager import ContextManager
from contextkeep._messages import Message, ToolCall
from contextkeep._session import Session
from contextkeep._usage import Usage
from contextkeep.integrations._bridge import Origins, common_prefix
from contextkeep.integrations._langchain_sync import EngineThread
from contextkeep.models.adapter import ModelReply
from contextkeep.models.overflow import classify_exception

__all__ = ["ContextKeepMiddleware", "ConversationId"]

if TYPE_CHECKING:  # their type parameters changed during 1.x: subscripted for the type checker only
    from langchain.agents.middleware import AgentState, ModelRequest, ModelResponse

    Request = ModelRequest[Any]
    Response = ModelResponse[Any]
    Handler = Callable[[Request], Awaitable[Response]]
    _Middleware = AgentMiddleware[AgentState[Any], Any, Any]
else:
    _Middleware = AgentMiddleware

ConversationId = str | Callable[["ModelRequest[Any]"], str] | None
"""A fixed conversation id, one computed from each request, or None (the run's `thread_id`)."""


def _neutral(message: BaseMessage) -> Message:
    """A LangChain message as a neutral message (through LangChain's own OpenAI conversion)."""
    return from_openai(convert_to_openai_messages([message]))[0]


def _framework(message: Message) -> AnyMessage:
    """A neutral message as a new LangChain message of its role's class."""
    content: Any = message.content if isinstance(message.content, str) else to_openai([message])[0]["content"]
    content = content or ""
    if message.role == "system":
        return SystemMessage(content)
    if message.role == "user":
        return HumanMessage(content, name=message.name)
    if message.role == "tool":
        return ToolMessage(content, tool_call_id=message.tool_call_id or "", name=message.name)
    calls, invalid = [], []
    for c in message.tool_calls:
        args = _arguments(c)
        if args is None:
            invalid.append(invalid_tool_call(name=c.name, args=c.arguments, id=c.id, error=None))
        else:
            calls.append(tool_call(name=c.name, args=args, id=c.id))
    return AIMessage(content, name=message.name, tool_calls=calls, invalid_tool_calls=invalid)


def _arguments(call: ToolCall) -> dict[str, Any] | None:
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


def _usage_of(message: AIMessage) -> Usage:
    """The provider's usage a LangChain reply carries (`usage_metadata`), or an empty `Usage`."""
    meta = message.usage_metadata
    if not meta:
        return Usage()
    details: Mapping[str, Any] = meta.get("input_token_details") or {}
    return Usage(
        input_tokens=meta.get("input_tokens"),
        output_tokens=meta.get("output_tokens"),
        total_tokens=meta.get("total_tokens"),
        cached_tokens=details.get("cache_read"),
        cache_write_tokens=details.get("cache_creation"),
    )


def _reply(response: Response) -> AIMessage:
    for m in response.result:
        if isinstance(m, AIMessage):
            return m
    raise TypeError(f"the model call returned no AIMessage: {[type(m).__name__ for m in response.result]}")


def _max_tokens(request: Request) -> int | None:
    """The reply limit of the call: the request's `max_tokens` setting, else the model's."""
    value = request.model_settings.get("max_tokens", getattr(request.model, "max_tokens", None))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class _Conversation:
    """One conversation's session, and what the middleware keeps about its requests."""

    session: Session
    origins: Origins[AnyMessage] = field(default_factory=Origins)
    converted: list[tuple[Message, AnyMessage]] = field(default_factory=list)
    """The last history, converted: the same messages at the same places are not converted again."""
    sources: list[AnyMessage] = field(default_factory=list)
    """The last history's own messages (`converted`'s origins)."""
    conversions: int = 0
    """History messages converted so far (each new one once)."""
    made: dict[str, AnyMessage] = field(default_factory=dict)
    """The messages made for the last view, by content key: a masked output is built once."""

    def history(self, messages: Sequence[AnyMessage]) -> list[tuple[Message, AnyMessage]]:
        """The request's messages as (neutral message, origin) pairs.

        Within a run the state hands over the same objects (compared in C, a few ns each); a run
        restored from a checkpointer hands over equal copies (comparing costs about 1 µs,
        converting 40–200 µs).
        """
        last = self.converted
        keep = common_prefix(self.sources, messages)
        converted = last[:keep]
        for i in range(keep, len(messages)):
            m = messages[i]
            if i < len(last) and last[i][1] == m:
                converted.append((last[i][0], m))
            else:
                converted.append((_neutral(m), m))
                self.conversions += 1
        self.converted, self.sources = converted, list(messages)
        return converted

    def messages(self, view: Sequence[Message]) -> list[AnyMessage]:
        """The view as LangChain messages: the originals where it left them as they were."""
        last, self.made = self.made, {}
        out: list[AnyMessage] = []
        for m, origin in self.origins.map_view(self.session, view):
            if origin is None:
                self.made[m.key] = last.get(m.key) or _framework(m)
            out.append(origin or self.made[m.key])
        return out


class _Model:
    """The rest of LangChain's model call (the handler) as the `ModelAdapter` `Session.complete` drives."""

    def __init__(self, conversation: _Conversation, request: Request, handler: Handler) -> None:
        self.conversation = conversation
        self.request = request
        self.handler = handler
        self.failure: Exception | None = None
        """The provider's own error behind the latest overflow."""

    async def complete(self, messages: Sequence[Message], **_: Any) -> ModelReply:
        """Call the handler with the view as the request's messages; the reply and its usage."""
        request = self.request.override(messages=self.conversation.messages(messages))
        try:
            response = await self.handler(request)
        except ContextOverflowError:
            raise
        except Exception as error:
            overflow = classify_exception(error)
            if overflow is None:
                raise
            self.failure = error
            raise overflow from error
        reply = _reply(response)
        return ModelReply(_neutral(reply), _usage_of(reply), raw=response)


class ContextKeepMiddleware(_Middleware):
    """Keeps every model call of a LangChain agent inside the model's context window.

    The blocking path (`agent.invoke`, `agent.stream`) runs the engine on a private event loop in
    a worker thread, and each model call in the caller's thread; `close()` stops that thread.

    Args:
        manager: The context manager (model, store, workspace, tokenizer, config).
        conversation_id: The transcript the runs continue: a fixed id, a function of the
            `ModelRequest`, or None for the run's `thread_id` (`config["configurable"]`).
        max_sessions: Conversations kept open (least recently used ones are closed first).

    A history that does not continue the transcript (edited state, a subagent sharing the
    thread id) continues in a transcript of its own (`Session.sync(..., fork=True)`).
    """

    def __init__(
        self, manager: ContextManager, *, conversation_id: ConversationId = None, max_sessions: int = 128
    ) -> None:
        super().__init__()
        self.manager = manager
        """The context manager the sessions are opened on."""
        self.conversation_id = conversation_id
        """How each request's conversation id is found."""
        self.max_sessions = max_sessions
        """Conversations kept open."""
        self._conversations: OrderedDict[str, _Conversation] = OrderedDict()
        self._tools: tuple[tuple[Any, ...], list[dict[str, Any]]] = ((), [])
        self._engine: EngineThread[Request, Response] = EngineThread()

    def wrap_model_call(
        self, request: Request, handler: Callable[[Request], Response]
    ) -> Response | AIMessage:
        """The model call with the view as its messages (blocking: `agent.invoke`, `agent.stream`)."""
        conversation_id = self._conversation_of(request)
        return self._engine.run(lambda model: self._call(conversation_id, request, model), handler)

    async def awrap_model_call(self, request: Request, handler: Handler) -> Response | AIMessage:
        """The model call with the view as its messages (`agent.ainvoke`, `agent.astream`)."""
        return await self._call(self._conversation_of(request), request, handler)

    async def session(self, conversation_id: str) -> Session:
        """The conversation's session (opened if needed): its transcript, state, usage and view."""
        return (await self._open(conversation_id)).session

    def close(self) -> None:
        """Stop the worker thread of the blocking path (if it was started).

        The tool-result copies its sessions still owe are written first: a script on
        `agent.invoke` may remove the workspace right after, and cannot await
        `ContextManager.close` on the worker's loop, where the store's connections live.
        """
        self._engine.close(self.manager.workspace.flush_pending)

    async def _call(self, conversation_id: str, request: Request, handler: Handler) -> Response:
        if not request.messages:
            return await handler(request)
        conversation = await self._open(conversation_id)
        session = conversation.session
        tools = self._openai_tools(request.tools)
        history = conversation.history(request.messages)
        try:
            await conversation.origins.sync(
                session, history, tools=tools, instructions=request.system_prompt, fork=True
            )
            model = _Model(conversation, request, handler)
            try:
                reply = await session.complete(model, tools=tools, max_tokens=_max_tokens(request))
            except ContextOverflowError as error:
                if model.failure is None or error.__cause__ is not model.failure:
                    raise
                failure = model.failure
            else:
                conversation.origins.remember(session.transcript[-1], _reply(reply.raw))
                response: Response = reply.raw
                return response
        finally:
            if session.conversation_id != conversation_id:  # forked: the next call starts afresh
                self._conversations.pop(conversation_id, None)
        raise failure  # the provider's own error, when compacting could not make the call fit

    async def _open(self, conversation_id: str) -> _Conversation:
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            session = self.manager.new_session(conversation_id)
            await session.load()
            conversation = self._conversations[conversation_id] = _Conversation(session)
            while len(self._conversations) > self.max_sessions:
                self._conversations.popitem(last=False)
        self._conversations.move_to_end(conversation_id)
        return conversation

    def _conversation_of(self, request: Request) -> str:
        given = self.conversation_id
        if callable(given):
            return given(request)
        if given is not None:
            return given
        try:
            thread = get_config().get("configurable", {}).get("thread_id")
        except RuntimeError:  # not inside a LangGraph run
            thread = None
        if thread is None:
            raise ValueError(
                "ContextKeepMiddleware needs a conversation id: run the agent with "
                "config={'configurable': {'thread_id': ...}} or give conversation_id=..."
            )
        return str(thread)

    def _openai_tools(self, tools: Sequence[Any]) -> list[dict[str, Any]] | None:
        """The request's tools as OpenAI function tools (converted again only when they change)."""
        if not tools:
            return None
        last, converted = self._tools
        if len(last) != len(tools) or any(a is not b for a, b in zip(last, tools, strict=True)):
            converted = [convert_to_openai_tool(t) for t in tools]
            self._tools = (tuple(tools), converted)
        return converted
