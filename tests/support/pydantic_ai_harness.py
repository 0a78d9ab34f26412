"""pydantic-ai: real `Agent` runs on pydantic-ai's `FunctionModel`, through `ContextKeepCapability`.

The function behind `FunctionModel` plays the provider: it gets exactly the messages pydantic-ai
would send, checks each request against the budget with the exact DeepSeek tokenizer and for
orphaned tool calls or returns, reports usage counted by that tokenizer, and raises the OpenAI
overflow error (as pydantic-ai's OpenAI model raises it) where a test asks.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelContextWindowExceededError, ModelHTTPError
from pydantic_ai.messages import (
    ModelMessage,
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
from contextkeep._formats import to_openai
from contextkeep._messages import Message
from contextkeep._tokens import PromptCounter, counter_for_model
from contextkeep.integrations._pydantic_ai_messages import Converter
from contextkeep.integrations.pydantic_ai import ContextKeepCapability
from contextkeep.testing._errors import overflow_error

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
