"""OpenAI Agents SDK: a `Model` wrapper whose every request is contextkeep's view, and a `Session`.

```python
from agents import Agent, Runner
from contextkeep.integrations.openai_agents import ContextKeepModel

model = ContextKeepModel(OpenAIChatCompletionsModel("deepseek-chat", client), cm, conversation_id="t-1001")
agent = Agent(name="coder", model=model, tools=[...])
```

Before every call of the wrapped model, the run's whole history (Responses input items) is
converted, synced into the conversation's transcript (`Session.sync` appends only what is new;
the instructions, the output schema and the tools count in the budget), and the model receives
the prepared view mapped back onto input items: the items the view leaves as they were are the
run's own (reasoning items and provider fields survive), masked tool outputs and the summary are
new items. The run's history (`result.to_input_list()`) stays whole. The call goes through
`Session.complete`: the reply is recorded with its usage (the confirmed baseline), and a provider's
context overflow is compacted (layer 4) and the call made again, at most
`max_token_limit_recovery_attempts` times; an overflow that cannot be recovered reaches the run
as the wrapped model raised it. `stream_response` streams the wrapped model's events as they come
(an overflow before the first event is recovered the same way).

`ContextKeepSession` is an Agents SDK session whose items live in a contextkeep store.
Needs `openai-agents>=0.24`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, NoReturn, cast

from agents.agent_output import AgentOutputSchemaBase
from agents.exceptions import ModelBehaviorError
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import FunctionTool, Tool
from agents.usage import Usage as AgentsUsage
from openai.types.responses import ResponseCompletedEvent, ResponseOutputItemDoneEvent
from openai.types.responses.response_prompt_param import ResponsePromptParam

from contextkeep._continuation import fingerprint
from contextkeep._errors import ConfigError, ContextOverflowError
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._usage import Usage
from contextkeep.integrations._bridge import Origins, common_prefix
from contextkeep.integrations._openai_agents_items import (
    Converted,
    Item,
    ItemHistory,
    reply_message,
    to_items,
)
from contextkeep.integrations._openai_agents_session import SESSION_DOCUMENT, ContextKeepSession
from contextkeep.models.adapter import ModelAdapter, ModelReply
from contextkeep.models.overflow import classify_exception

if TYPE_CHECKING:
    from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest

__all__ = ["SESSION_DOCUMENT", "ContextKeepModel", "ContextKeepSession"]


@dataclass(frozen=True)
class _Call:
    """One request of the run, apart from its input."""

    instructions: str | None
    settings: ModelSettings
    tools: list[Tool]
    output_schema: AgentOutputSchemaBase | None
    handoffs: list[Handoff]
    tracing: ModelTracing
    previous_response_id: str | None
    conversation_id: str | None
    prompt: ResponsePromptParam | None

    def respond(self, model: Model, items: list[TResponseInputItem]) -> Awaitable[ModelResponse]:
        """`model.get_response` with these arguments and `items`."""
        return model.get_response(
            self.instructions,
            items,
            self.settings,
            self.tools,
            self.output_schema,
            self.handoffs,
            self.tracing,
            previous_response_id=self.previous_response_id,
            conversation_id=self.conversation_id,
            prompt=self.prompt,
        )

    def stream(self, model: Model, items: list[TResponseInputItem]) -> AsyncIterator[TResponseStreamEvent]:
        """`model.stream_response` with these arguments and `items`."""
        return model.stream_response(
            self.instructions,
            items,
            self.settings,
            self.tools,
            self.output_schema,
            self.handoffs,
            self.tracing,
            previous_response_id=self.previous_response_id,
            conversation_id=self.conversation_id,
            prompt=self.prompt,
        )

    def outside(self) -> str | None:
        """What travels beside the messages and counts in the budget: instructions, output schema."""
        parts = [self.instructions] if self.instructions else []
        if self.output_schema is not None and not self.output_schema.is_plain_text():
            parts.append(json.dumps(self.output_schema.json_schema(), ensure_ascii=False, sort_keys=True))
        return "\n\n".join(parts) or None


class ContextKeepModel(Model):
    """Wraps any Agents SDK `Model` so that every request is contextkeep's view of the run's history.

    Args:
        model: The model to call (`OpenAIResponsesModel`, `OpenAIChatCompletionsModel`, ...).
        manager: The context manager: model spec, store, workspace, configuration.
        conversation_id: The conversation's id in the store (one wrapper per conversation).
        fork: When a history does not continue the transcript (edited, or rewritten by a
            handoff's input filter), continue it in a transcript of its own instead of
            raising `HistoryDivergedError`.
    """

    def __init__(
        self, model: Model, manager: ContextManager, *, conversation_id: str, fork: bool = False
    ) -> None:
        self.model = model
        """The wrapped model."""
        self.session = manager.new_session(conversation_id)
        """The conversation's contextkeep session (transcript, state, usage)."""
        self.fork = fork
        """Whether a diverging history forks a transcript of its own."""
        self._history = ItemHistory()
        self._origins: Origins[tuple[Item, ...]] = Origins()
        self._tools: tuple[tuple[object, ...], list[dict[str, Any]]] = ((), [])
        self._items: tuple[list[tuple[Message, tuple[Item, ...] | None]], list[int], list[Any]] = ([], [], [])
        """The last view's pairs, the index after each one's items, and the items (`_request`)."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        """The wrapped model's response to the view of `input` (see the module)."""
        call = _Call(
            system_instructions, model_settings, tools, output_schema, handoffs, tracing,
            previous_response_id, conversation_id, prompt,
        )  # fmt: skip
        reply = await self._complete(_Responding(self, call), call, input)
        return cast(ModelResponse, reply.raw)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """The wrapped model's stream for the view of `input`, event by event (see the module)."""
        call = _Call(
            system_instructions, model_settings, tools, output_schema, handoffs, tracing,
            previous_response_id, conversation_id, prompt,
        )  # fmt: skip
        events: asyncio.Queue[TResponseStreamEvent | None] = asyncio.Queue()
        task = asyncio.create_task(self._complete(_Streaming(self, call, events), call, input))
        task.add_done_callback(lambda _: events.put_nowait(None))
        try:
            while (event := await events.get()) is not None:
                yield event
            task.result()  # the call's error, if any, after the events it streamed
        finally:
            task.cancel()  # the run stopped reading: stop the call
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        """The wrapped model's retry advice."""
        return self.model.get_retry_advice(request)

    async def close(self) -> None:
        """Close the wrapped model."""
        await self.model.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        await self.model._cleanup_on_run_end(owner)

    async def _complete(
        self, adapter: ModelAdapter, call: _Call, input: str | list[TResponseInputItem]
    ) -> ModelReply:
        """Sync the history, then prepare → call → record, recovering from overflows."""
        if call.previous_response_id or call.conversation_id:
            raise ConfigError(
                "previous_response_id",
                "ContextKeepModel sends the whole history itself; a server-managed conversation "
                "(previous_response_id, conversation_id) sends only the new items",
            )
        items: Sequence[Item] = [{"role": "user", "content": input}] if isinstance(input, str) else input
        tools = self._tool_dicts(call)
        history = self._history.convert(items)
        self._remember_reply(history[self._history.kept :])
        await self._origins.sync(
            self.session, history, tools=tools, instructions=call.outside(), fork=self.fork
        )
        try:
            reply = await self.session.complete(adapter, tools=tools, max_tokens=call.settings.max_tokens)
        except ContextOverflowError as error:
            original = error.__cause__
            if not isinstance(original, Exception):
                raise
            raise original from original.__cause__  # as the wrapped model raised it
        self._history.recorded(reply.message)
        return reply

    def _remember_reply(self, added: Sequence[Converted]) -> None:
        """The run's own items for the reply recorded last: the first message the history added.

        (`Origins.sync` would find them too, comparing the whole history with the transcript.)
        """
        transcript = self.session.transcript
        last = transcript[-1] if transcript else None
        if added and last is not None and last.role == "assistant":
            message, origin = added[0]
            if fingerprint(message) == fingerprint(last):
                self._origins.remember(last, origin)

    def _request(self, view: Sequence[Message]) -> list[TResponseInputItem]:
        """The view as input items: the run's own where the view left a message as it was.

        The pairs the last view began with (the same objects) keep their items, so a call
        builds items only for the messages after them.
        """
        pairs = self._origins.map_view(self.session, view)
        last, ends, items = self._items
        keep = common_prefix(last, pairs)
        del items[ends[keep - 1] if keep else 0 :], ends[keep:]
        for m, origin in islice(pairs, keep, None):
            items.extend(to_items(m) if origin is None else origin)
            ends.append(len(items))
        self._items = (pairs, ends, items)
        return list(items)

    def _tool_dicts(self, call: _Call) -> list[dict[str, Any]]:
        """Function tools and handoffs as OpenAI tool definitions (the same list while they stay)."""
        sources = (*call.tools, *call.handoffs)
        known, dicts = self._tools
        if len(known) == len(sources) and all(a is b for a, b in zip(known, sources, strict=True)):
            return dicts
        dicts = [_tool_dict(tool) for tool in call.tools] + [_handoff_dict(h) for h in call.handoffs]
        self._tools = (sources, dicts)
        return dicts


def _tool_dict(tool: Tool) -> dict[str, Any]:
    if isinstance(tool, FunctionTool):
        function = {"name": tool.name, "description": tool.description, "parameters": tool.params_json_schema}
        return {"type": "function", "function": function}
    return {"type": "function", "function": {"name": getattr(tool, "name", type(tool).__name__)}}


def _handoff_dict(handoff: Handoff) -> dict[str, Any]:
    function = {
        "name": handoff.tool_name,
        "description": handoff.tool_description,
        "parameters": handoff.input_json_schema,
    }
    return {"type": "function", "function": function}


def _usage(usage: Any) -> Usage:
    """The SDK's `Usage` or a Responses `ResponseUsage` as contextkeep's (all zero: none reported)."""
    if usage is None or not (usage.input_tokens or usage.output_tokens):
        return Usage()
    cached = getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", None)
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens or None,
        cached_tokens=cached or None,
    )


def _reply(output: list[TResponseOutputItem], usage: Usage, raw: Any) -> ModelReply:
    """The reply to record: one assistant message of the response's items in their replay form."""
    items = ModelResponse(output=output, usage=AgentsUsage(), response_id=None).to_input_items()
    return ModelReply(reply_message(items), usage, raw=raw)


def _raise(error: Exception, *, retryable: bool = True) -> NoReturn:
    """Raise `error`, as a `ContextOverflowError` when it is one and the call can be made again."""
    overflow = classify_exception(error) if retryable else None
    if overflow is None:
        raise error
    raise overflow from error


class _Responding:
    """The model adapter `Session.complete` calls: the wrapped model's `get_response`."""

    def __init__(self, owner: ContextKeepModel, call: _Call) -> None:
        self.owner, self.call = owner, call

    async def complete(self, messages: Sequence[Message], **_: Any) -> ModelReply:
        try:
            response = await self.call.respond(self.owner.model, self.owner._request(messages))
        except Exception as error:
            _raise(error)
        return _reply(response.output, _usage(response.usage), response)


class _Streaming:
    """The model adapter for `stream_response`: each event goes to the run as it comes."""

    def __init__(
        self, owner: ContextKeepModel, call: _Call, events: asyncio.Queue[TResponseStreamEvent | None]
    ) -> None:
        self.owner, self.call, self.events = owner, call, events

    async def complete(self, messages: Sequence[Message], **_: Any) -> ModelReply:
        started, done, final = False, [], None
        try:
            async for event in self.call.stream(self.owner.model, self.owner._request(messages)):
                started = True
                self.events.put_nowait(event)
                if isinstance(event, ResponseCompletedEvent):
                    final = event.response
                elif isinstance(event, ResponseOutputItemDoneEvent):
                    done.append(event.item)
        except Exception as error:
            _raise(error, retryable=not started)  # events already streamed cannot be taken back
        if final is None:
            raise ModelBehaviorError("Model did not produce a final response!")
        return _reply(final.output or done, _usage(final.usage), final)
