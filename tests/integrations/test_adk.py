"""The Google ADK plugin on a real `LlmAgent`, run by an ADK `Runner` over `InMemorySessionService`.

The model is an ADK `BaseLlm` subclass playing a fixed task (read 20 KB chunks with a tool, one
call per turn, then answer). It bills every request it receives as DeepSeek would: the request
rendered the way ADK's own OpenAI-format bridge (`LiteLlm`) sends it, counted with DeepSeek's
real tokenizer. Nothing reaches Google: the model is local and no ADK client is ever built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import httpx2
import openai
import pytest
from google.adk.agents import LlmAgent, RunConfig
from google.adk.agents.callback_context import CallbackContext
from google.adk.apps import App
from google.adk.models._capabilities import LlmCapabilities
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import errors as genai_errors
from google.genai import types
from pydantic import PrivateAttr

from contextkeep import ContextConfig, ContextManager, ModelSpec
from contextkeep._baseline import UsageStatus
from contextkeep._events import Event, ModelCompleted, RecoveryFailed
from contextkeep._formats import from_openai
from contextkeep._messages import Message
from contextkeep._session import Session
from contextkeep._tokens import HFEncoder, PromptCounter, counter_for_model
from contextkeep.integrations._adk_contents import instructions_of, tools_of
from contextkeep.integrations.adk import ContextKeepPlugin, to_messages
from contextkeep.testing._errors import overflow_error
from support import DEEPSEEK_TOKENIZER, REPO, require_shared

WINDOW = 32_768
MAX_OUTPUT = 4_096
BUDGET = WINDOW - MAX_OUTPUT
APP, USER = "ck_adk", "user-1"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Google credentials, no `.env` loading: nothing could reach Google even by mistake."""
    monkeypatch.setenv("ADK_DISABLE_LOAD_DOTENV", "1")
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def deepseek() -> HFEncoder:
    """DeepSeek's real tokenizer (loaded once: the managers and the provider share it)."""
    require_shared("tokenizers", "deepseek_tokenizer.json")
    return HFEncoder(DEEPSEEK_TOKENIZER)


@pytest.fixture(scope="module")
def billing(deepseek: HFEncoder) -> PromptCounter:
    """DeepSeek's count of a prompt (its tokenizer and chat template)."""
    return counter_for_model("deepseek-chat", deepseek)


Managers = Callable[..., ContextManager]


@pytest.fixture
async def managers(tmp_path: Path, deepseek: HFEncoder) -> AsyncIterator[Managers]:
    """Makes context managers on DeepSeek's tokenizer (`store` in `folder`); closes them all after."""
    made: list[ContextManager] = []

    def make(
        folder: str = "ck", store: str | None = None, config: ContextConfig | None = None
    ) -> ContextManager:
        cm = ContextManager(
            ModelSpec("deepseek-chat", WINDOW, MAX_OUTPUT),
            config=config,
            store=store or "memory://",
            workspace=tmp_path / folder / "ws",
            tokenizer=deepseek,
        )
        made.append(cm)
        return cm

    yield make
    for cm in made:
        await cm.close()


def chunk(index: int) -> str:
    """About 20 KB of build log, different for every chunk."""
    lines = [
        f"[chunk {index:03d} line {j:04d}] step {j * 7 % 97:02d} compiled src/module_{index}_{j}.c -> "
        f"build/module_{index}_{j}.o in {j % 13}.{j % 7}s (warnings: {j % 3})"
        for j in range(200)
    ]
    return "\n".join(lines)


def read_chunk(index: int) -> str:
    """Read one chunk of the build log.

    Args:
      index: Which chunk (1-based).
    """
    return chunk(index)


# --- the provider: renders and bills a request, checks its pairs ------------------------------


def rendered(request: LlmRequest) -> tuple[list[Message], list[dict[str, Any]]]:
    """The request as `LiteLlm` sends it to a chat-completions provider: messages and tools."""
    out: list[dict[str, Any]] = []
    system = request.config.system_instruction
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system})
    pending: list[str] = []
    for content in request.contents:
        parts = content.parts or []
        if content.role == "model":
            calls = [
                {
                    "id": f"call_{len(out)}_{j}",
                    "type": "function",
                    "function": {
                        "name": p.function_call.name,
                        "arguments": json.dumps(p.function_call.args, ensure_ascii=False),
                    },
                }
                for j, p in enumerate(parts)
                if p.function_call is not None
            ]
            pending = [str(c["id"]) for c in calls]
            text = "".join(p.text for p in parts if p.text and not p.thought)
            out.append(
                {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}
            )
            continue
        for p in parts:
            if p.function_response is not None:
                answered = pending.pop(0) if pending else "unanswered"
                text = json.dumps(p.function_response.response, ensure_ascii=False)
                out.append({"role": "tool", "tool_call_id": answered, "content": text})
        texts = [p.text for p in parts if p.text]
        if texts:
            out.append({"role": "user", "content": "\n".join(texts)})
    tools = [
        {
            "type": "function",
            "function": {
                "name": fd.name,
                "description": fd.description or "",
                "parameters": fd.parameters_json_schema,
            },
        }
        for tool in request.config.tools or []
        if isinstance(tool, types.Tool)
        for fd in tool.function_declarations or []
    ]
    return from_openai(out), tools


def orphans(contents: list[types.Content]) -> int:
    """Calls without their result and results without their call (ADK pairs them by order and name)."""
    count, open_calls = 0, list[str | None]()
    for content in contents:
        parts = content.parts or []
        if content.role == "model":
            count += len(open_calls)  # a new model turn while calls are unanswered
            open_calls = [p.function_call.name for p in parts if p.function_call is not None]
            continue
        for p in parts:
            if p.function_response is not None:
                if p.function_response.name in open_calls:
                    open_calls.remove(p.function_response.name)
                else:
                    count += 1
    return count + len(open_calls)


@dataclass(frozen=True)
class Seen:
    """One request as the model received it."""

    billed: int
    """Its prompt tokens, by DeepSeek's tokenizer."""
    messages: int
    """Messages in it (system included)."""
    orphans: int
    """Unpaired calls and results."""
    contents: str
    """The contents, serialised (byte-identical views serialise identically)."""
    failed: bool = False
    """The model answered this one with an overflow error."""


class ScriptedModel(BaseLlm):
    """Each user message starts a task of `calls` turns of `parallel` tool calls, then a final answer.

    Calls listed in `overflow_at` (1-based, over the model's life) fail with the provider's real
    context-overflow error, as a model with a smaller window than configured would. Streamed, a
    reply is a partial chunk, then the whole reply.
    """

    model: str = "scripted-deepseek"
    billing: PromptCounter
    calls: int = 60
    parallel: int = 1
    overflow_at: frozenset[int] = frozenset()
    error: Literal["gemini", "deepseek"] = "gemini"
    _seen: list[Seen] = PrivateAttr(default_factory=list)
    _issued: int = PrivateAttr(default=0)
    _left: int = PrivateAttr(default=0)

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=False)

    @property
    def seen(self) -> list[Seen]:
        return self._seen

    def begin(self) -> None:
        """A user message arrives: a new task starts."""
        self._left = self.calls

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        messages, tools = rendered(llm_request)
        billed = self.billing.count_prompt(messages, tools)
        serialised = json.dumps([c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents])
        failing = len(self._seen) + 1 in self.overflow_at
        self._seen.append(Seen(billed, len(messages), orphans(llm_request.contents), serialised, failing))
        if failing:
            raise overflow(self.error, billed, billed - 2_000)
        if stream:
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="…")]), partial=True)
        yield self._reply(llm_request, billed)

    def _reply(self, request: LlmRequest, billed: int) -> LlmResponse:
        if self._left > 0:
            self._left -= 1
            calls = [{"index": self._issued + j} for j in range(1, self.parallel + 1)]
            self._issued += self.parallel
            parts = [types.Part(function_call=types.FunctionCall(name="read_chunk", args=a)) for a in calls]
            output = self.billing.count_text(json.dumps(calls))
        else:
            text = f"Read {self._issued} chunks; the build is clean."
            parts = [types.Part(text=text)]
            output = self.billing.count_text(text)
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=billed, candidates_token_count=output, total_token_count=billed + output
        )
        return LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)


def overflow(kind: Literal["gemini", "deepseek"], prompt: int, limit: int) -> Exception:
    """The provider's own exception for a prompt over its window, with its real error body."""
    if kind == "gemini":
        message = f"The input token count ({prompt}) exceeds the maximum number of tokens allowed ({limit})."
        return genai_errors.ClientError(
            400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
        )
    found = overflow_error(
        kind, window=limit, prompt=prompt, max_tokens=MAX_OUTPUT, total=True, request_id="r"
    )
    assert found is not None
    status, body = found
    response = httpx2.Response(
        status, json=body, request=httpx2.Request("POST", "https://api.deepseek.com/chat")
    )
    return openai.BadRequestError(body["error"]["message"], response=response, body=body["error"])


# --- the agent ---------------------------------------------------------------------------------


@dataclass
class Agent:
    """An ADK app with its plugins, its model and session service."""

    model: ScriptedModel
    runner: Runner
    sessions: InMemorySessionService

    @classmethod
    def build(
        cls, model: ScriptedModel, *plugins: BasePlugin, sessions: InMemorySessionService | None = None
    ) -> Agent:
        agent = LlmAgent(
            name="reader",
            model=model,
            instruction="You read build logs chunk by chunk with read_chunk and report problems.",
            tools=[read_chunk],
        )
        sessions = sessions or InMemorySessionService()
        app = App(name=APP, root_agent=agent, plugins=list(plugins))
        return cls(model, Runner(app=app, session_service=sessions), sessions)

    async def start(self, session_id: str) -> None:
        await self.sessions.create_session(app_name=APP, user_id=USER, session_id=session_id)

    async def ask(self, session_id: str, text: str, config: RunConfig | None = None) -> list[Any]:
        self.model.begin()
        message = types.Content(role="user", parts=[types.Part(text=text)])
        run = self.runner.run_async(
            user_id=USER, session_id=session_id, new_message=message, run_config=config
        )
        return [e async for e in run]

    async def events(self, session_id: str) -> list[Any]:
        session = await self.sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
        assert session is not None
        return list(session.events)


class Contents(BasePlugin):
    """Keeps the contents of every request as it passes (a plugin's place in the list is its turn)."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name)
        self.requests: list[list[types.Content]] = []

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        self.requests.append(list(llm_request.contents))
        return None


def completed(cm: ContextManager) -> list[ModelCompleted]:
    """Every `model.completed` event the manager emits from now on."""
    seen: list[ModelCompleted] = []

    def listen(event: Event) -> None:
        assert isinstance(event, ModelCompleted)
        seen.append(event)

    cm.events.subscribe(listen, "model.completed")
    return seen


def recoveries(cm: ContextManager) -> list[str]:
    """The `model.recovery.*` events the manager emits from now on (type, and the reason of a failure)."""
    seen: list[str] = []

    def listen(event: Event) -> None:
        seen.append(f"{event.type} {event.reason}" if isinstance(event, RecoveryFailed) else event.type)

    cm.events.subscribe(listen, "model.recovery.started", "model.recovery.succeeded", "model.recovery.failed")
    return seen


def bare(m: Message) -> Message:
    """A message without its transcript id and annotations (offload references)."""
    return replace(m, id=None, metadata={})


async def assert_follows(session: Session, agent: Agent, session_id: str) -> list[Any]:
    """The transcript is ADK's history, message for message (call ids too); ADK holds every chunk whole."""
    events = await agent.events(session_id)
    history = to_messages([e.content for e in events if e.content is not None])
    assert [bare(m) for m in session.transcript] == [bare(m) for m in history]
    results = [
        p.function_response.response
        for e in events
        if e.content
        for p in e.content.parts or []
        if p.function_response
    ]
    assert results == [{"result": chunk(i)} for i in range(1, len(results) + 1)]
    return events


# --- the tests ---------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_long_tool_loop_stays_in_the_window(managers: Managers, billing: PromptCounter) -> None:
    cm = managers()
    usage = completed(cm)
    built, sent = Contents("built"), Contents("sent")  # the request before and after the plugin
    agent = Agent.build(ScriptedModel(billing=billing, calls=60), built, ContextKeepPlugin(cm), sent)
    await agent.start("long")

    await agent.ask("long", "Read the build log, all 60 chunks.")

    seen = agent.model.seen
    assert len(seen) == 61
    assert max(s.billed for s in seen) <= BUDGET
    assert all(s.orphans == 0 for s in seen)
    async with cm.session("long") as s:
        events = await assert_follows(s, agent, "long")
    assert len(events) == 1 + 61 + 60  # the user, every reply, every result: nothing was rewritten
    everything = len(json.dumps([e.content.model_dump(mode="json", exclude_none=True) for e in events]))
    assert seen[-1].messages < 61 and len(seen[-1].contents) < everything / 20  # 122 messages, 1.2 MB
    # Unchanged contents are ADK's own objects (thought signatures and the like survive); the rest are new.
    for adk, view in zip(built.requests, sent.requests, strict=True):
        own = [c for c in view if any(c is a for a in adk)]
        assert own and all(c.model_dump() not in [a.model_dump() for a in adk] for c in view if c not in own)
    # Every reply's usage became the confirmed baseline, at the provider's own prompt count.
    assert [u.input_tokens for u in usage] == [s.billed for s in seen]
    assert {u.usage_status for u in usage} == {UsageStatus.CONFIRMED_BASELINE}


@pytest.mark.slow
async def test_parallel_calls_streamed_stay_paired(managers: Managers, billing: PromptCounter) -> None:
    cm = managers()
    usage = completed(cm)
    agent = Agent.build(ScriptedModel(billing=billing, calls=30, parallel=2), ContextKeepPlugin(cm))
    await agent.start("parallel")

    streamed = await agent.ask(
        "parallel", "Read 60 chunks, two at a time.", RunConfig.model_validate({"streaming_mode": "sse"})
    )

    assert any(e.partial for e in streamed)
    seen = agent.model.seen
    assert len(seen) == 31 and all(s.orphans == 0 for s in seen) and max(s.billed for s in seen) <= BUDGET
    last = json.loads(seen[-1].contents)
    results = [n for c in last if (n := sum("function_response" in p for p in c["parts"]))]
    assert len(last) < 40 and len(results) > 3 and set(results) == {2}  # each round's two results together
    async with cm.session("parallel") as s:
        events = await assert_follows(s, agent, "parallel")
    assert len(events) == 1 + 31 + 30 and len(s.transcript) == 1 + 31 + 60
    assert len(usage) == 31  # the streamed chunks before each reply are not replies


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["gemini", "deepseek"])
async def test_a_provider_overflow_is_compacted_and_retried(
    managers: Managers, billing: PromptCounter, provider: Literal["gemini", "deepseek"]
) -> None:
    cm = managers()
    usage, recovered = completed(cm), recoveries(cm)
    agent = Agent.build(
        ScriptedModel(billing=billing, calls=60, overflow_at=frozenset({40}), error=provider),
        ContextKeepPlugin(cm),
    )
    await agent.start("overflow")

    events = await agent.ask("overflow", "Read the build log, all 60 chunks.")

    seen = agent.model.seen
    assert len(seen) == 62 and [i for i, s in enumerate(seen, 1) if s.failed] == [40]
    failed, retried = seen[39], seen[40]
    assert retried.billed <= failed.billed - 2_000  # compacted by at least the gap the provider reported
    assert retried.orphans == 0 and max(s.billed for s in seen) <= BUDGET
    assert not any(e.error_code for e in events)
    assert events[-1].content.parts[0].text == "Read 60 chunks; the build is clean."
    async with cm.session("overflow") as s:
        await assert_follows(s, agent, "overflow")
        assert "L4" in {r.layer for r in s.state.records}
    assert recovered == ["model.recovery.started", "model.recovery.succeeded"]
    assert [u.input_tokens for u in usage] == [s.billed for s in seen if not s.failed]
    assert {u.usage_status for u in usage} == {UsageStatus.CONFIRMED_BASELINE}


async def test_a_second_overflow_is_retried_as_often_as_configured(
    managers: Managers, billing: PromptCounter
) -> None:
    for attempts in (1, 2):
        cm = managers(
            f"attempts-{attempts}", config=ContextConfig(max_token_limit_recovery_attempts=attempts)
        )
        model = ScriptedModel(billing=billing, calls=15, overflow_at=frozenset({10, 11}))
        agent, recovered = Agent.build(model, ContextKeepPlugin(cm)), recoveries(cm)
        await agent.start("twice")
        if attempts == 2:
            await agent.ask("twice", "Read 15 chunks.")
            seen = model.seen
            assert len(seen) == 18 and seen[11].billed < seen[10].billed < seen[9].billed
            assert recovered == ["model.recovery.started"] * 2 + ["model.recovery.succeeded"]
            continue
        with pytest.raises(genai_errors.ClientError) as raised:  # ADK raises the provider's own error
            await agent.ask("twice", "Read 15 chunks.")
        assert len(model.seen) == 11 and f"input token count ({model.seen[9].billed})" in str(raised.value)
        assert recovered == ["model.recovery.started", "model.recovery.failed attempts_exhausted"]


async def test_each_agent_of_a_team_has_its_own_transcript(
    managers: Managers, billing: PromptCounter
) -> None:
    class Delegating(BaseLlm):
        """Hands the task to the reader."""

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            call = types.FunctionCall(name="transfer_to_agent", args={"agent_name": "reader"})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))

    cm = managers()
    model = ScriptedModel(billing=billing, calls=3)
    reader = LlmAgent(name="reader", model=model, tools=[read_chunk])
    lead = LlmAgent(name="lead", model=Delegating(model="delegating"), sub_agents=[reader])
    sessions = InMemorySessionService()
    runner = Runner(
        app=App(name=APP, root_agent=lead, plugins=[ContextKeepPlugin(cm)]), session_service=sessions
    )
    await sessions.create_session(app_name=APP, user_id=USER, session_id="team")
    for text in ["Read three chunks.", "And three more."]:  # the second turn goes to the reader directly
        model.begin()
        message = types.Content(role="user", parts=[types.Part(text=text)])
        _ = [e async for e in runner.run_async(user_id=USER, session_id="team", new_message=message)]

    async with cm.session("team") as lead_s, cm.session("team/reader") as reader_s:
        assert [m.tool_calls[0].name for m in lead_s.transcript if m.tool_calls] == ["transfer_to_agent"]
        assert sum(m.role == "tool" and m.name == "read_chunk" for m in reader_s.transcript) == 6
        assert reader_s.transcript[-1].text == "Read 6 chunks; the build is clean."


async def test_a_failed_tool_call_continues_in_a_fork(managers: Managers, billing: PromptCounter) -> None:
    """ADK drops a call left without a result from later requests: the history no longer continues."""
    failures = iter([False, True])

    def read_chunk(index: int) -> str:
        """Read one chunk of the build log (the second read fails).

        Args:
          index: Which chunk (1-based).
        """
        if next(failures, False):
            raise OSError("the disk is gone")
        return chunk(index)

    model = ScriptedModel(billing=billing, calls=3)
    built, plugin = Contents("built"), ContextKeepPlugin(managers())
    agent = LlmAgent(name="reader", model=model, tools=[read_chunk])
    runner = Runner(
        app=App(name=APP, root_agent=agent, plugins=[built, plugin]), session_service=InMemorySessionService()
    )
    await runner.session_service.create_session(app_name=APP, user_id=USER, session_id="flaky")
    for text in ["Read three chunks.", "Try again."]:
        model.begin()
        message = types.Content(role="user", parts=[types.Part(text=text)])
        try:
            _ = [e async for e in runner.run_async(user_id=USER, session_id="flaky", new_message=message)]
        except OSError:
            assert text == "Read three chunks."

    s = await plugin.session("flaky")
    assert s.conversation_id.startswith("flaky~fork-") and all(o.orphans == 0 for o in model.seen)
    assert [bare(m) for m in s.transcript] == [bare(m) for m in to_messages(built.requests[-1])] + [
        bare(s.transcript[-1])
    ]
    assert s.transcript[-1].text == "Read 5 chunks; the build is clean."


async def test_a_dynamic_instruction_stays_out_of_the_transcript(
    managers: Managers, billing: PromptCounter
) -> None:
    """Beside a `static_instruction`, ADK sends the instruction as a user content at the current turn."""
    model = ScriptedModel(billing=billing, calls=30)
    reader = LlmAgent(
        name="reader",
        model=model,
        tools=[read_chunk],
        static_instruction="You read build logs.",
        instruction="Today is {day}.",
    )
    sessions, plugin = InMemorySessionService(), ContextKeepPlugin(managers())
    runner = Runner(app=App(name=APP, root_agent=reader, plugins=[plugin]), session_service=sessions)
    agent = Agent(model, runner, sessions)
    await sessions.create_session(app_name=APP, user_id=USER, session_id="dynamic", state={"day": "Monday"})

    await agent.ask("dynamic", "Read 30 chunks.")

    s = await plugin.session("dynamic")
    assert s.conversation_id == "dynamic"  # the history continued the transcript at every call: no fork
    await assert_follows(s, agent, "dynamic")
    last = [json.loads(seen.contents)[-1]["parts"][0].get("text", "") for seen in model.seen[1:]]
    assert all("Today is Monday." in text for text in last)  # where ADK put it: after the latest results
    assert (
        len(model.seen) == 31
        and all(o.orphans == 0 for o in model.seen)
        and max(o.billed for o in model.seen) <= BUDGET
    )


async def test_an_image_the_view_masks_is_sent_as_its_reference(
    managers: Managers, billing: PromptCounter
) -> None:
    picture = types.Part(inline_data=types.Blob(data=b"\x89PNG\r\n\x1a\n" + bytes(64), mime_type="image/png"))
    built, sent = Contents("built"), Contents("sent")
    agent = Agent.build(ScriptedModel(billing=billing, calls=20), built, ContextKeepPlugin(managers()), sent)
    await agent.start("image")
    task = types.Content(
        role="user", parts=[types.Part(text="Read 20 chunks; the screenshot shows the error."), picture]
    )
    agent.model.begin()
    _ = [e async for e in agent.runner.run_async(user_id=USER, session_id="image", new_message=task)]

    first, last = sent.requests[0][0], sent.requests[-1][0]
    assert (
        first is built.requests[0][0] and first.parts is not None and first.parts[1].inline_data is not None
    )
    assert last is not built.requests[-1][0] and last.parts is not None  # the pinned task, image masked
    assert all(p.inline_data is None for p in last.parts) and "screenshot" in (last.parts[0].text or "")


def test_contents_convert_as_adk_sends_them_to_a_chat_model() -> None:
    model = types.Content(
        role="model",
        parts=[
            types.Part(text="Let me think.", thought=True),
            types.Part(text="Running it."),
            types.Part(function_call=types.FunctionCall(id="adk-1", name="run", args={"code": "print(1)"})),
            types.Part(function_call=types.FunctionCall(id="toolu_7", name="look", args={})),
        ],
    )
    results = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(id="adk-1", name="run", response={"result": "1"})
            ),
            types.Part(
                function_response=types.FunctionResponse(id="toolu_7", name="look", response={"seen": [1, 2]})
            ),
            types.Part(
                file_data=types.FileData(file_uri="gs://bucket/report.pdf", mime_type="application/pdf")
            ),
            types.Part(executable_code=types.ExecutableCode(code="print(2)", language=types.Language.PYTHON)),
        ],
    )
    reply, first, second, rest = to_messages([model, results])
    assert (reply.reasoning, reply.text) == ("Let me think.", "Running it.")
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("run", '{"code": "print(1)"}'),
        ("look", "{}"),
    ]
    assert (
        reply.tool_calls[0].id.startswith("call_ck") and reply.tool_calls[1].id == "toolu_7"
    )  # ADK's own ids: none
    assert (first.tool_call_id, first.text) == (reply.tool_calls[0].id, "1")
    assert (second.tool_call_id, second.text) == ("toolu_7", '{"seen": [1, 2]}')
    assert (
        rest.role == "user"
        and rest.text == "print(2)"
        and [p.url for p in rest.media] == ["gs://bucket/report.pdf"]
    )


def test_instructions_and_tools_count_as_sent() -> None:
    config = types.GenerateContentConfig(
        system_instruction=types.Content(
            parts=[types.Part(text="Be brief."), types.Part(text="Cite files.")]
        ),
        tools=[
            types.Tool(
                function_declarations=[
                    types.FunctionDeclaration(
                        name="grep",
                        description="Search the tree.",
                        parameters=types.Schema(
                            type=types.Type.OBJECT,
                            properties={"pattern": types.Schema(type=types.Type.STRING)},
                        ),
                    ),
                    types.FunctionDeclaration(name="pwd"),
                ]
            ),
            types.Tool(google_search=types.GoogleSearch()),  # a built-in tool: sent as it is, not counted
        ],
    )
    assert instructions_of(config) == "Be brief.\nCite files."
    assert instructions_of(types.GenerateContentConfig(system_instruction="Be brief.")) == "Be brief."
    grep, pwd = tools_of(config) or []
    assert grep["function"]["parameters"]["properties"]["pattern"]["type"] == "string"
    assert pwd["function"] == {
        "name": "pwd",
        "description": "",
        "parameters": {"type": "object", "properties": {}},
    }


async def test_other_errors_reach_adk_unchanged(managers: Managers, billing: PromptCounter) -> None:
    class Failing(ScriptedModel):
        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            raise genai_errors.ServerError(
                503, {"error": {"code": 503, "message": "The model is overloaded."}}
            )
            yield  # an async generator, as ADK calls it

    agent = Agent.build(Failing(billing=billing), ContextKeepPlugin(managers()))
    await agent.start("busy")
    with pytest.raises(genai_errors.ServerError, match="overloaded"):
        await agent.ask("busy", "Read the build log.")


@pytest.mark.slow
async def test_a_restarted_process_continues_with_the_same_views(
    tmp_path: Path, managers: Managers, billing: PromptCounter
) -> None:
    """Two runs of one two-turn task: one process throughout, or a new one (same store) for turn 2."""
    turns = ["Read the first 30 chunks.", "Now read 30 more."]
    one = Agent.build(
        ScriptedModel(billing=billing, calls=30), ContextKeepPlugin(managers("a", store(tmp_path / "a")))
    )
    await one.start("restart")
    for text in turns:
        await one.ask("restart", text)

    first = managers("b", store(tmp_path / "b"))
    before = Agent.build(ScriptedModel(billing=billing, calls=30), ContextKeepPlugin(first))
    await before.start("restart")
    await before.ask("restart", turns[0])
    async with first.session("restart") as s:
        view = json.dumps((await s.current_view()).messages)
    assert another_process_view(tmp_path / "b", "restart") == view
    second = managers("b", store(tmp_path / "b"))  # a new manager: nothing in memory
    after = Agent.build(before.model, ContextKeepPlugin(second), sessions=before.sessions)
    await after.ask("restart", turns[1])

    assert [s.contents for s in before.model.seen] == [s.contents for s in one.model.seen]
    assert len(one.model.seen) == 62 and max(s.billed for s in one.model.seen) <= BUDGET
    async with second.session("restart") as s:
        await assert_follows(s, after, "restart")


def store(folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'ck.db'}"


def another_process_view(folder: Path, conversation_id: str) -> str:
    """The view a separate Python process builds from the same store."""
    script = (
        "import asyncio, json, sys\n"
        "from contextkeep import ContextManager, ModelSpec\n"
        "async def main():\n"
        f"    cm = ContextManager(ModelSpec('deepseek-chat', {WINDOW}, {MAX_OUTPUT}), store=sys.argv[1],"
        " workspace=sys.argv[2], tokenizer='hf:' + sys.argv[3])\n"
        "    async with cm.session(sys.argv[4]) as s:\n"
        "        print(json.dumps((await s.current_view()).messages))\n"
        "asyncio.run(main())\n"
    )
    argv = [store(folder), str(folder / "ws"), str(DEEPSEEK_TOKENIZER), conversation_id]
    done = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip()


@pytest.mark.slow
def test_the_example_runs_offline() -> None:
    env = {**os.environ, "ADK_DISABLE_LOAD_DOTENV": "1"}
    env.pop("GOOGLE_API_KEY", None)
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "adk_agent.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("call  1: the model saw   1 contents")
    assert "call 41:" in done.stdout and "layers run: L1" in done.stdout
