"""The Google ADK plugin on a real `LlmAgent`, run by an ADK `Runner` over `InMemorySessionService`.

The model is an ADK `BaseLlm` subclass playing a fixed task (read 20 KB chunks with a tool, one
call per turn, then answer). It bills every request it receives as DeepSeek would: the request
rendered the way ADK's own OpenAI-format bridge (`LiteLlm`) sends it, counted with DeepSeek's
real tokenizer. Nothing reaches Google: the model is local and no ADK client is ever built.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx2
import openai
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

from contextkeep import ContextManager
from contextkeep._events import Event, ModelCompleted, RecoveryFailed
from contextkeep._formats import from_openai
from contextkeep._messages import Message
from contextkeep._session import Session
from contextkeep._tokens import PromptCounter
from contextkeep.integrations.adk import to_messages
from contextkeep.testing._errors import overflow_error

WINDOW = 32_768


MAX_OUTPUT = 4_096


BUDGET = WINDOW - MAX_OUTPUT


APP, USER = "ck_adk", "user-1"


Managers = Callable[..., ContextManager]


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
