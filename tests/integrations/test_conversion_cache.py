"""Each integration converts and maps back only what is new, and still sees an edited history.

A framework hands over its whole history before every model call. Within a run the history
keeps the same objects and the view keeps the same messages, so every history message must be
converted once (`conversions`) and every view message mapped once (`Origins.mapped`), however
many calls follow. An edit of an older message (a new object in its place) in a history that no
longer holds the latest reply must still reach `Session.sync` as what it is: the typed
`HistoryDivergedError` naming that message, or a fork that shows it, as without any cache.
"""

from __future__ import annotations

import dataclasses
import gc
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from agents import Agent as OpenAIAgent
from agents import Runner as OpenAIRunner
from agents import function_tool, set_tracing_disabled
from agents.items import ModelResponse as OpenAIResponse
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from agents.usage import Usage as OpenAIUsage
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner as AdkRunner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from pydantic import Field
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from contextkeep import ContextManager, ModelSpec
from contextkeep._errors import HistoryDivergedError
from contextkeep._session import Session
from contextkeep._view import View
from contextkeep.integrations._pydantic_ai_messages import Converter
from contextkeep.integrations.adk import ContextKeepPlugin
from contextkeep.integrations.langchain import ContextKeepMiddleware
from contextkeep.integrations.openai_agents import ContextKeepModel
from contextkeep.integrations.pydantic_ai import ContextKeepCapability

SPEC = ModelSpec("deepseek-chat", context_window=131_072, max_output_tokens=4_096)
"""A window the short runs never fill: no compaction, the view is the whole history."""
CALLS = 6
CID = "ticket-7"


def output(n: int) -> str:
    """About 1 KB of a tool's output (long enough to be offloaded at ingest)."""
    return "\n".join(f"{n:03d}:{i:02d} status=ok worker-{i % 5}" for i in range(40))


@pytest.fixture
async def manager(tmp_path: Path, deepseek_tokenizer: Path) -> AsyncIterator[Callable[[], ContextManager]]:
    made: list[ContextManager] = []

    def make() -> ContextManager:
        cm = ContextManager(
            SPEC,
            store="memory://",
            workspace=tmp_path / f"ws{len(made)}",
            tokenizer=f"hf:{deepseek_tokenizer}",
        )
        made.append(cm)
        return cm

    yield make
    for cm in made:
        await cm.close()


# LangChain.
@tool
def read_log(part: int) -> str:
    """Read one part of the build log."""
    return output(part)


class Instant(BaseChatModel):
    """Calls `read_log` `calls` times, then answers; keeps the texts of every request."""

    calls: int = CALLS
    step: int = 0
    seen: list[list[str]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "instant"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        self.seen.append([str(m.content) for m in messages])
        self.step += 1
        if self.step <= self.calls:
            reply = AIMessage(
                "", tool_calls=[{"name": "read_log", "args": {"part": self.step}, "id": f"c{self.step}"}]
            )
        else:
            reply = AIMessage("done")
        reply.usage_metadata = {"input_tokens": 1_000, "output_tokens": 10, "total_tokens": 1_010}
        return ChatResult(generations=[ChatGeneration(message=reply)])


async def test_langchain_converts_each_message_once_and_still_forks_an_edit(
    manager: Callable[[], ContextManager],
) -> None:
    cm = manager()
    middleware = ContextKeepMiddleware(cm, conversation_id=CID)
    agent = create_agent(Instant(seen=[]), [read_log], middleware=[middleware])
    state: Any = await agent.ainvoke(cast(Any, {"messages": [HumanMessage("Why does build 4411 fail?")]}))
    requested = len(state["messages"]) - 1  # the last reply is in no request
    conversation = middleware._conversations[CID]
    assert conversation.conversions == requested  # each message once, over CALLS + 1 calls
    assert conversation.origins.mapped == requested  # the view (the whole history) mapped once

    # A rewritten state: an older tool result replaced, another last answer. The rest is cached.
    edited: list[BaseMessage] = list(state["messages"])
    edited[2] = ToolMessage("(edited away)", tool_call_id="c1", name="read_log")
    edited[-1] = AIMessage("Another answer.")
    model = Instant(calls=0, seen=[])
    agent = create_agent(model, [read_log], middleware=[middleware])
    await agent.ainvoke(cast(Any, {"messages": [*edited, HumanMessage("Go on.")]}))
    assert "(edited away)" in model.seen[0]  # the fork's view, not the stored transcript's
    async with cm.session(CID) as s:  # the transcript the edit diverged from is as it was
        assert [m.text for m in s.transcript] == [str(m.content) for m in state["messages"]]
    middleware.close()


# pydantic-ai.
def pydantic_agent(capability: ContextKeepCapability, calls: int) -> PydanticAgent[None, str]:
    made = [0]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        made[0] += 1
        usage = RequestUsage(input_tokens=1_000, output_tokens=10)
        if made[0] <= calls:
            return ModelResponse([ToolCallPart("read_file", {"path": f"src/x{made[0]}.py"})], usage=usage)
        return ModelResponse([TextPart("Done.")], usage=usage)

    agent = PydanticAgent(
        FunctionModel(model), instructions="You are a coding agent.", capabilities=[capability]
    )

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        return output(len(path))

    return agent


async def test_pydantic_ai_converts_each_message_once_and_still_raises_on_an_edit(
    manager: Callable[[], ContextManager],
) -> None:
    capability = ContextKeepCapability(manager(), conversation_id=CID)
    first = await pydantic_agent(capability, CALLS).run("Fix the cache.")
    history = first.all_messages()
    conversation = capability._conversations[CID]
    assert conversation.converter.conversions == len(history) - 1
    assert conversation.origins.mapped == len(history) - 1  # one neutral message per pydantic-ai one here

    edited = history[:-1]  # another branch: without the latest reply, and an older result edited
    request = edited[2]
    result = request.parts[0] if isinstance(request, ModelRequest) else None
    assert isinstance(request, ModelRequest) and isinstance(result, ToolReturnPart)
    edited[2] = dataclasses.replace(
        request, parts=[ToolReturnPart(result.tool_name, "(edited)", result.tool_call_id)]
    )
    with pytest.raises(HistoryDivergedError) as raised:
        await pydantic_agent(capability, 0).run("Go on.", message_history=edited)
    assert raised.value.index == 2
    # Only the edited message and the new prompt were converted: the others are the same objects.
    assert conversation.converter.conversions == len(history) - 1 + 2


def test_pydantic_ai_history_trimmed_at_the_front_is_not_converted_again() -> None:
    """A history processor keeping the newest messages: every call shifts them all."""
    converter = Converter()
    history: list[ModelMessage] = [ModelRequest([UserPromptPart("Fix the cache.")])]
    for n in range(1, 40):
        history += [
            ModelResponse([ToolCallPart("read_file", {"path": f"m{n}"}, f"c{n}")]),
            ModelRequest([ToolReturnPart("read_file", output(n), f"c{n}")]),
        ]
        converted = converter.convert(history[-12:])
        assert [o.message for _, o in converted] == history[-12:]
    assert converter.conversions == len(history)  # each message once, though each call shifts them


# OpenAI Agents SDK.
@function_tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: The file's path.
    """
    return output(len(path))


class Scripted(Model):
    """Makes `calls` tool calls, then answers."""

    def __init__(self, calls: int) -> None:
        self.calls, self.made = calls, 0

    async def get_response(self, *args: Any, **kwargs: Any) -> OpenAIResponse:
        self.made += 1
        usage = OpenAIUsage(requests=1, input_tokens=1_000, output_tokens=10, total_tokens=1_010)
        if self.made <= self.calls:
            call = function_call("read_file", {"path": f"src/x{self.made}.py"}, call_id=f"x{self.made}")
            return OpenAIResponse(output=[call], usage=usage, response_id=None)
        return OpenAIResponse(output=[assistant_message("Done.")], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def test_openai_agents_converts_each_item_once_and_still_raises_on_an_edit(
    manager: Callable[[], ContextManager],
) -> None:
    set_tracing_disabled(True)
    model = ContextKeepModel(Scripted(CALLS), manager(), conversation_id=CID)
    agent = OpenAIAgent(name="coder", instructions="You are a coding agent.", model=model, tools=[read_file])
    result = await OpenAIRunner.run(agent, "Fix the cache.", max_turns=CALLS + 2)
    items = result.to_input_list()
    assert model._history.conversions == len(items) - 1  # the final answer is in no request
    assert model._origins.mapped == len(items) - 1

    edited: list[Any] = [dict(item) for item in items[:-1]]  # fresh copies, the answer left out
    assert edited[2]["type"] == "function_call_output"
    edited[2]["output"] = "(edited)"
    model.model = Scripted(0)
    with pytest.raises(HistoryDivergedError) as raised:
        await OpenAIRunner.run(agent, [*edited, {"role": "user", "content": "Go on."}], max_turns=3)
    assert raised.value.index == 2
    assert model._history.conversions == len(items) - 1 + len(edited) - 2 + 1  # equal copies kept theirs


# Google ADK.
class Coder(BaseLlm):
    """Makes `calls` tool calls, then answers."""

    calls: int = CALLS
    made: int = 0
    results: list[list[Any]] = Field(default_factory=list)
    """The function results of every request."""
    sent: list[Any] = Field(default_factory=list)
    """Weak references to the contents of every request."""

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> Any:
        self.made += 1
        self.sent += map(weakref.ref, llm_request.contents)
        self.results.append(
            [
                p.function_response.response
                for c in llm_request.contents
                for p in c.parts or ()
                if p.function_response
            ]
        )
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1_000, candidates_token_count=10, total_token_count=1_010
        )
        if self.made <= self.calls:
            part = types.Part(
                function_call=types.FunctionCall(name="read_adk_file", args={"path": f"x{self.made}"})
            )
        else:
            part = types.Part(text="Done.")
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)


def read_adk_file(path: str) -> str:
    """Read a file.

    Args:
      path: The file's path.
    """
    return output(len(path))


async def test_adk_converts_each_content_once_and_still_forks_an_edit(
    manager: Callable[[], ContextManager], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADK_DISABLE_LOAD_DOTENV", "1")
    plugin = ContextKeepPlugin(manager())
    model = Coder(model="coder")
    agent = LlmAgent(name="coder", model=model, instruction="You are a coding agent.", tools=[read_adk_file])
    sessions = InMemorySessionService()
    runner = AdkRunner(app=App(name="app", root_agent=agent, plugins=[plugin]), session_service=sessions)
    await sessions.create_session(app_name="app", user_id="u", session_id=CID)

    async def turn(text: str) -> None:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for _ in runner.run_async(user_id="u", session_id=CID, new_message=message):
            pass

    await turn("Fix the cache.")
    conversation = plugin._open[CID]
    contents = 1 + 2 * CALLS  # the prompt, then a call and its result per tool call
    assert conversation.history.conversions == contents  # ADK rebuilt every request; each converted once
    # Each view message mapped back once, and the last one of the view before again (the
    # message after a content decides where it ends): O(1) per call, not the whole view.
    assert conversation.rebuilt.mapped == contents + CALLS
    assert [len(r) for r in model.results] == list(range(CALLS + 1))  # every result in every request
    # What the cache keeps is ADK's payloads, not the copies it makes of them for each request:
    # those go once the reply is recorded, as without the plugin.
    gc.collect()
    assert [ref() for ref in model.sent if ref() is not None] == []
    held = len((await plugin.session(CID)).transcript)

    # ADK's history rewritten (a rewind, its own compaction): an older result, the last answer.
    parts = [
        e.content.parts for e in sessions.sessions["app"]["u"][CID].events if e.content and e.content.parts
    ]
    result = next(p[0].function_response for p in parts if p[0].function_response is not None)
    result.response = {"result": "(edited)"}
    parts[-1][0].text = "Another answer."
    model.calls, model.made = 0, 0
    await turn("Go on.")
    s = await plugin.session(CID)
    assert s.conversation_id.startswith(f"{CID}~fork-")
    assert any(m.text == "(edited)" for m in s.transcript)
    assert {"result": "(edited)"} in model.results[-1]  # the fork's view reached the model
    # From the edited result (the third content) on: the request's 2 more contents, less 2 kept.
    assert conversation.history.conversions == contents + contents
    assert held == contents + 1  # the answer too


# Tool declarations: pydantic-ai and ADK build theirs anew for every request.
@pytest.fixture
def handed(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The `tools` every `Session.prepare` got, in order."""
    tools: list[object] = []
    prepare = Session.prepare

    async def recording(self: Session, **kwargs: Any) -> View:
        tools.append(kwargs.get("tools"))
        return await prepare(self, **kwargs)

    monkeypatch.setattr(Session, "prepare", recording)
    return tools


async def test_pydantic_ai_hands_unchanged_tools_over_as_the_same_list(
    manager: Callable[[], ContextManager], handed: list[object]
) -> None:
    """The same list while the declarations read the same: counted by identity, not rendered per call."""
    await pydantic_agent(ContextKeepCapability(manager(), conversation_id=CID), CALLS).run("Fix the cache.")
    assert len(handed) == CALLS + 1 and handed[0]
    assert all(tools is handed[0] for tools in handed)


async def test_adk_hands_unchanged_tools_over_as_the_same_list(
    manager: Callable[[], ContextManager], handed: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADK_DISABLE_LOAD_DOTENV", "1")
    model = Coder(model="coder", calls=CALLS)
    agent = LlmAgent(name="coder", model=model, instruction="You are a coding agent.", tools=[read_adk_file])
    sessions = InMemorySessionService()
    app = App(name="app", root_agent=agent, plugins=[ContextKeepPlugin(manager())])
    await sessions.create_session(app_name="app", user_id="u", session_id=CID)
    message = types.Content(role="user", parts=[types.Part(text="Fix the cache.")])
    async for _ in AdkRunner(app=app, session_service=sessions).run_async(
        user_id="u", session_id=CID, new_message=message
    ):
        pass
    assert len(handed) == CALLS + 1 and handed[0]
    assert all(tools is handed[0] for tools in handed)
