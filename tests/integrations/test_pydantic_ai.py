"""pydantic-ai: real `Agent` runs on pydantic-ai's `FunctionModel`, through `ContextKeepCapability`.

The function behind `FunctionModel` plays the provider: it gets exactly the messages pydantic-ai
would send, checks each request against the budget with the exact DeepSeek tokenizer and for
orphaned tool calls or returns, reports usage counted by that tokenizer, and raises the OpenAI
overflow error (as pydantic-ai's OpenAI model raises it) where a test asks.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelContextWindowExceededError, ModelHTTPError, ModelServerError
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from contextkeep import ContextManager, ModelSpec
from contextkeep._baseline import UsageStatus
from contextkeep._errors import HistoryDivergedError
from contextkeep._events import Event
from contextkeep._formats import to_openai
from contextkeep._messages import Message
from contextkeep._tokens import PromptCounter, counter_for_model
from contextkeep.integrations._pydantic_ai_messages import Converter
from contextkeep.integrations.pydantic_ai import ContextKeepCapability
from contextkeep.testing._errors import overflow_error
from support import REPO

WINDOW = 32_768
SPEC = ModelSpec("deepseek-chat", context_window=WINDOW, max_output_tokens=4_096)
BUDGET = WINDOW - 4_096  # the reserved output is the model's maximum
CALLS = 64
CID = "ticket-1001"
LIMITS = UsageLimits(request_limit=500)
INSTRUCTIONS = "You are a coding agent. Read what you need, then answer."
TASK = "Find where the session cache is invalidated."
WORDS = ("def", "return", "self", "import", "class", "value", "index", "cache", "session", "token", "budget")


def tool_output(n: int) -> str:
    """About 20 KB of source-like text, different for every call."""
    rnd = random.Random(n)
    lines = [f"{n:03d}:{i:04d} " + " ".join(rnd.choice(WORDS) for _ in range(12)) for i in range(300)]
    return "\n".join(lines)[:20_000]


def neutral(messages: Sequence[ModelMessage]) -> list[Message]:
    """What the model reads of pydantic-ai messages, as neutral messages."""
    return [m for m, _ in Converter().convert(messages)]


def orphans(messages: Sequence[ModelMessage]) -> set[str]:
    """Tool call ids with a call but no return, or a return but no call."""
    calls = {p.tool_call_id for m in messages if isinstance(m, ModelResponse) for p in m.tool_calls}
    returns = {
        p.tool_call_id
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    return calls ^ returns


def overflow(prompt: int) -> ModelHTTPError:
    """The OpenAI overflow error, as pydantic-ai's OpenAI model raises it (the SDK's `body` is the error object)."""
    answer = overflow_error(
        "openai", window=WINDOW, prompt=prompt, max_tokens=None, total=False, request_id="r"
    )
    assert answer is not None
    _, body = answer
    return ModelHTTPError.for_category(
        ModelContextWindowExceededError,
        status_code=400,
        model_name=SPEC.key,
        body=body["error"],
        provider_error_code="context_length_exceeded",
        provider_error_type="invalid_request_error",
    )


@dataclass
class Provider:
    """The model behind `FunctionModel`: checks each request, then calls `read_file` until `calls` are made."""

    counter: PromptCounter
    calls: int = CALLS
    fail: Sequence[int] = ()
    """Which requests (0-based, every attempt counts) raise `error`."""
    error: Callable[[], Exception] = lambda: overflow(WINDOW + 300)
    capability: ContextKeepCapability | None = None
    requests: list[list[ModelMessage]] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    returned: list[ModelResponse] = field(default_factory=list)
    streamed: int = 0
    """Streamed answers given."""
    baselines: int = 0
    """Requests after which the baseline was found confirmed (no compaction in between)."""

    def prompt_tokens(self, messages: Sequence[ModelMessage], info: AgentInfo) -> int:
        """The request as the model gets it (instructions, messages, tools), by the exact tokenizer."""
        head = [Message("system", info.instructions)] if info.instructions else []
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description or "",
                    "parameters": t.parameters_json_schema,
                },
            }
            for t in (*info.function_tools, *info.output_tools)
        ]
        return self.counter.count_prompt([*head, *neutral(messages)], tools)

    async def check(self, messages: list[ModelMessage], info: AgentInfo) -> int:
        """Every check a request must pass; returns its prompt tokens."""
        tokens = self.prompt_tokens(messages, info)
        assert tokens <= BUDGET, f"request {len(self.requests)}: {tokens} tokens > {BUDGET}"
        assert not orphans(messages), f"request {len(self.requests)}: orphans {orphans(messages)}"
        if self.capability is not None and self.returned and len(self.requests) - 1 not in self.fail:
            await self.check_baseline()  # (after a failed attempt the recovery invalidated it)
        self.requests.append(messages)
        self.tokens.append(tokens)
        if len(self.requests) - 1 in self.fail:
            raise self.error()
        return tokens

    async def check_baseline(self) -> None:
        """The last reply's usage is the conversation's; confirmed unless this request was compacted."""
        assert self.capability is not None and self.capability.last_view is not None
        session = await self.capability.session()
        assert session.usage.input_tokens == self.returned[-1].usage.input_tokens
        if not self.capability.last_view.compacted:
            assert session.usage.status is UsageStatus.CONFIRMED_BASELINE
            self.baselines += 1

    def step(self) -> int:
        """Which call this is (one per response returned)."""
        return len(self.returned) + 1

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tokens = await self.check(messages, info)
        n = self.step()
        if n <= self.calls:
            parts: list[Any] = [
                ThinkingPart(f"I need file {n}.", signature=f"sig-{n}"),
                TextPart(f"Reading module {n}."),
                ToolCallPart("read_file", {"path": f"src/m{n}.py"}),
            ]
        else:
            parts = [TextPart("The cache is invalidated in session.py.")]
        output = sum(
            self.counter.count_text(p.content if not isinstance(p, ToolCallPart) else p.args_as_json_str())
            for p in parts
        )
        response = ModelResponse(parts=parts, usage=RequestUsage(input_tokens=tokens, output_tokens=output))
        self.returned.append(response)
        return response

    async def stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        """The streamed twin: text, or one tool call in two chunks."""
        await self.check(messages, info)
        self.streamed += 1
        n = self.streamed
        if n <= self.calls:
            yield {0: DeltaToolCall("read_file", '{"path": ', tool_call_id=f"call_{n}")}
            yield {0: DeltaToolCall(None, f'"src/m{n}.py"}}')}
        else:
            yield "The cache is invalidated "
            yield "in session.py."


Managers = Callable[..., ContextManager]
"""`managers(store=None)`: a context manager on the test's folder (its store closed after the test)."""


@pytest.fixture
async def managers(tmp_path: Path, deepseek_tokenizer: Path) -> AsyncIterator[Managers]:
    opened: list[ContextManager] = []

    def open_manager(store: str | None = None) -> ContextManager:
        cm = ContextManager(
            SPEC,
            store=store or f"sqlite:///{tmp_path / 'ck.db'}",
            workspace=tmp_path / "ws",
            tokenizer=f"hf:{deepseek_tokenizer}",
        )
        opened.append(cm)
        return cm

    yield open_manager
    for cm in opened:
        await cm.close()


def read_file(path: str) -> str:
    """Read a source file."""
    return tool_output(int(path.removeprefix("src/m").removesuffix(".py")))


def agent(
    cm: ContextManager, provider: Provider, *, stream: bool = False
) -> tuple[Agent[None, str], ContextKeepCapability]:
    capability = ContextKeepCapability(cm, conversation_id=CID)
    provider.capability = capability
    model = FunctionModel(stream_function=provider.stream) if stream else FunctionModel(provider)
    a = Agent(model, instructions=INSTRUCTIONS, system_prompt="Work carefully.", capabilities=[capability])
    a.tool_plain(read_file)
    return a, capability


def provider(tokenizer: Path, **kwargs: Any) -> Provider:
    return Provider(counter_for_model(SPEC.key, f"hf:{tokenizer}"), **kwargs)


def wire(messages: Sequence[Message]) -> str:
    """The OpenAI JSON of neutral messages, byte for byte."""
    return json.dumps(to_openai(list(messages)), ensure_ascii=False)


async def assert_transcript_is_history(
    capability: ContextKeepCapability, history: Sequence[ModelMessage]
) -> None:
    session = await capability.session()
    assert wire(session.transcript) == wire(neutral(history))


@pytest.mark.slow
async def test_long_tool_loop_stays_in_budget_and_history_stays_whole(
    managers: Managers, deepseek_tokenizer: Path
) -> None:
    p = provider(deepseek_tokenizer)
    a, capability = agent(managers(), p)
    result = await a.run(TASK, usage_limits=LIMITS)

    history = result.all_messages()
    assert len(p.requests) == CALLS + 1  # every check passed inside the provider
    # The run's own history holds every message, every tool output whole.
    assert len(history) == 2 + 2 * CALLS
    outputs = [
        part.content
        for m in history
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, ToolReturnPart)
    ]
    assert outputs == [tool_output(n) for n in range(1, CALLS + 1)]
    await assert_transcript_is_history(capability, history)
    # The model got a compacted view: far fewer messages than the history, which is over the window.
    assert len(p.requests[-1]) < len(history) // 2
    assert p.counter.count_prompt(neutral(history)) > WINDOW
    # Usage from every reply reached the baseline (checked at each request, and here for the
    # last); between compactions it was confirmed.
    assert p.baselines >= CALLS // 2
    session = await capability.session()
    assert session.usage.input_tokens == p.returned[-1].usage.input_tokens
    assert session.usage.status is UsageStatus.CONFIRMED_BASELINE
    # Unchanged messages are pydantic-ai's own objects: the responses, thinking signatures and all.
    for request in p.requests:
        for m in request:
            if isinstance(m, ModelResponse):
                assert any(m is r for r in p.returned)


async def test_overflow_is_compacted_and_retried_once(managers: Managers, deepseek_tokenizer: Path) -> None:
    cm = managers()
    events: list[Event] = []
    cm.events.subscribe(
        events.append, "model.recovery.started", "model.recovery.succeeded", "model.recovery.failed"
    )
    p = provider(deepseek_tokenizer, calls=24, fail=[20])
    a, capability = agent(cm, p)
    result = await a.run(TASK, usage_limits=LIMITS)

    # Request 20 failed; the same step was attempted again, compacted by at least the reported gap.
    assert len(p.requests) == 24 + 2
    assert p.tokens[21] <= p.tokens[20] - 300
    assert [e.type for e in events] == ["model.recovery.started", "model.recovery.succeeded"]
    # The failed attempt left no trace in the run's history or the transcript.
    assert len(result.all_messages()) == 2 + 2 * 24
    await assert_transcript_is_history(capability, result.all_messages())


async def test_recovery_is_bounded_and_other_errors_pass(
    managers: Managers, deepseek_tokenizer: Path
) -> None:
    cm = managers()
    events: list[Event] = []
    cm.events.subscribe(events.append, "model.recovery.failed")
    p = provider(deepseek_tokenizer, calls=12, fail=range(8, 100))
    a, _ = agent(cm, p)
    with pytest.raises(ModelContextWindowExceededError):
        await a.run(TASK, usage_limits=LIMITS)
    # One compact-and-retry (max_token_limit_recovery_attempts=1), then the error reaches the caller.
    assert len(p.requests) == 8 + 2
    assert [getattr(e, "reason", None) for e in events] == ["attempts_exhausted"]

    # A server error is not an overflow: it reaches the caller as it was, nothing compacted.
    other = managers("memory://")
    other.events.subscribe(events.append)
    events.clear()
    server = ModelHTTPError.for_category(ModelServerError, status_code=500, model_name=SPEC.key, body=None)
    failing = provider(deepseek_tokenizer, calls=12, fail=[3], error=lambda: server)
    b, _ = agent(other, failing)
    with pytest.raises(ModelHTTPError) as raised:
        await b.run(TASK, usage_limits=LIMITS)
    assert not [e for e in events if e.type.startswith("model.recovery")]
    assert raised.value is server and len(failing.requests) == 4


@pytest.mark.slow
async def test_a_second_process_continues_with_a_byte_identical_view(
    tmp_path: Path, managers: Managers, deepseek_tokenizer: Path
) -> None:
    cm = managers()
    first = provider(deepseek_tokenizer, calls=30)
    a, capability = agent(cm, first)
    result = await a.run(TASK, usage_limits=LIMITS)
    saved = ModelMessagesTypeAdapter.dump_json(result.all_messages())
    with sqlite3.connect(tmp_path / "ck.db") as source, sqlite3.connect(tmp_path / "copy.db") as copy:
        source.backup(copy)  # the store as another process finds it (WAL included)

    # A fresh manager on the same store builds the same view, byte for byte.
    restarted = managers(f"sqlite:///{tmp_path / 'copy.db'}")
    fresh = restarted.new_session(CID)
    await fresh.load()
    view = await (await capability.session()).current_view()
    assert wire((await fresh.current_view()).neutral) == wire(view.neutral)

    # Both continue the conversation from the history loaded again from JSON (as a server does):
    # the running process, and the new one. The first request each model gets is the same, and
    # each sends its own loaded objects where the view left them.
    start = len(first.requests)
    again = ModelMessagesTypeAdapter.validate_json(saved)
    await a.run("Now fix it.", message_history=again, usage_limits=LIMITS)
    b = provider(deepseek_tokenizer, calls=0)
    b_agent, _ = agent(restarted, b)
    loaded = ModelMessagesTypeAdapter.validate_json(saved)
    await b_agent.run("Now fix it.", message_history=loaded, usage_limits=LIMITS)
    assert wire(neutral(b.requests[0])) == wire(neutral(first.requests[start]))
    for sent, own in ((first.requests[start], again), (b.requests[0], loaded)):
        kept = [m for m in sent if isinstance(m, ModelResponse)]
        assert kept and all(any(m is h for h in own) for m in kept)


async def test_streamed_run_and_its_recovery(managers: Managers, deepseek_tokenizer: Path) -> None:
    cm = managers()
    events: list[Event] = []
    cm.events.subscribe(events.append, "model.recovery.started", "model.recovery.succeeded")
    p = provider(deepseek_tokenizer, calls=24, fail=[18])
    a, capability = agent(cm, p, stream=True)
    async with a.run_stream(TASK, usage_limits=LIMITS) as run:
        output = await run.get_output()
    assert output == "The cache is invalidated in session.py."
    history = run.all_messages()
    assert len(history) == 2 + 2 * 24
    assert len(p.requests[-1]) < len(history)
    await assert_transcript_is_history(capability, history)
    last = history[-1]
    assert isinstance(last, ModelResponse)
    assert (await capability.session()).usage.output_tokens == last.usage.output_tokens
    # The overflow came as the stream opened: compacted, and the same step streamed again.
    assert [e.type for e in events] == ["model.recovery.started", "model.recovery.succeeded"]
    assert p.tokens[19] <= p.tokens[18] - 300


async def test_conversation_follows_the_run_and_a_diverging_history(
    managers: Managers, deepseek_tokenizer: Path
) -> None:
    cm = managers()
    p = provider(deepseek_tokenizer, calls=2)
    capability = ContextKeepCapability(cm)  # no id: each run's own conversation id
    a = Agent(FunctionModel(p), capabilities=[capability])
    a.tool_plain(read_file)
    first = await a.run(TASK, conversation_id="run-a", usage_limits=LIMITS)
    assert wire((await capability.session("run-a")).transcript) == wire(neutral(first.all_messages()))
    # A history without the latest reply (another branch) does not continue the transcript:
    # a typed error, or a fork of its own.
    edited = first.all_messages()[:-1]
    with pytest.raises(HistoryDivergedError):
        await a.run("Go on.", message_history=edited, conversation_id="run-a", usage_limits=LIMITS)
    forking = ContextKeepCapability(cm, conversation_id="run-a", fork=True)
    b = Agent(FunctionModel(p), capabilities=[forking])
    b.tool_plain(read_file)
    await b.run("Go on.", message_history=edited, usage_limits=LIMITS)
    assert (await forking.session()).conversation_id.startswith("run-a~fork-")
    assert len((await capability.session("run-a")).transcript) == len(neutral(first.all_messages()))


@pytest.mark.slow
def test_example_runs_offline() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "pydantic_ai_agent.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "the model saw" in done.stdout and "history holds" in done.stdout
