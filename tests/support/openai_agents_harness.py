"""OpenAI Agents SDK: `ContextKeepModel` under a real `agents.Runner` tool loop, and `ContextKeepSession`.

The model is the SDK's own test model, `agents.testing.ScriptedModel`, scripted like a provider
behind a Chat Completions endpoint: each step answers with a reasoning item and a function call
(an answer after the last), reports as usage the exact DeepSeek count of what it received (the
request as the SDK's own Chat Completions converter renders it), and one step can raise OpenAI's
real context-overflow error (`openai.BadRequestError`, code `context_length_exceeded`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from agents import Agent, function_tool, set_tracing_disabled
from agents.models.chatcmpl_converter import Converter
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage
from openai.types.responses.response_reasoning_item import ResponseReasoningItem, Summary

from contextkeep._baseline import UsageStatus
from contextkeep._formats import from_openai
from contextkeep._messages import Message
from contextkeep.integrations.openai_agents import ContextKeepModel
from contextkeep.testing._errors import overflow_error

set_tracing_disabled(True)


WINDOW = 32_768


MAX_OUTPUT = 4_096


BUDGET = WINDOW - MAX_OUTPUT
"""What a request may hold: the window less the output it must leave room for."""


INSTRUCTIONS = "You are a careful coding agent. Read the files you need, then answer."


TASK = "Find where request handlers round their results, across the whole repository."


def source_file(path: str) -> str:
    """~20 KB of code-like text, different for every path."""
    seed = sum(map(ord, path))
    lines = (
        f"{i:04d} {path}: def handler_{i}(request): return compute(request, {(seed * 7919 + i) % 100_003})"
        for i in range(400)
    )
    return "\n".join(lines)[:20_000]


@function_tool
def read_file(path: str) -> str:
    """Read one file of the repository.

    Args:
        path: The file's path.
    """
    return source_file(path)


def http_library() -> Any:
    """The HTTP library the installed openai SDK is built on (httpx2 in recent versions)."""
    try:
        return importlib.import_module("httpx2")
    except ImportError:
        return importlib.import_module("httpx")


def overflow(prompt: int) -> openai.BadRequestError:
    """OpenAI's real overflow answer (the fake server's body), raised the way the openai SDK raises it."""
    answer = overflow_error(
        "openai", window=WINDOW, prompt=prompt, max_tokens=None, total=False, request_id="r"
    )
    assert answer is not None
    status, body = answer
    http = http_library()
    response = http.Response(
        status, json=body, request=http.Request("POST", "https://api.openai.com/v1/responses")
    )
    return openai.BadRequestError(f"Error code: {status} - {body}", response=response, body=body["error"])


@dataclass
class Seen:
    """One request the provider answered, and what contextkeep's state was when it came."""

    items: list[dict[str, Any]]
    tokens: int
    status: UsageStatus
    baseline: int | None
    compactions: int


@dataclass
class Provider:
    """The SDK's `ScriptedModel`, scripted like a provider: `calls` tool calls, then an answer."""

    counter: Any
    calls: int
    watched: ContextKeepModel | None = None
    overflow_at: int | None = None
    """The step whose first attempt is refused with the overflow error."""
    run: str = "a"
    """Names this run's items (ids are unique across the runs of a conversation)."""
    seen: list[Seen] = field(default_factory=list)
    model: ScriptedModel = field(default_factory=ScriptedModel)

    def __post_init__(self) -> None:
        for step in range(1, self.calls + 2):
            if step == self.overflow_at:
                self.model.enqueue(ModelStep.respond(self.refuse))
            self.model.enqueue(ModelStep.respond(self.answer))

    def tokens(self, call: ModelCall) -> int:
        """Exact DeepSeek prompt tokens of the request as a Chat Completions provider receives it."""
        messages: list[Any] = [{"role": "system", "content": call.system_instructions}]
        messages += Converter.items_to_messages(call.input)
        tools = [Converter.tool_to_openai(tool) for tool in call.tools]
        return int(self.counter.count_prompt(from_openai(messages), tools))

    def refuse(self, call: ModelCall) -> openai.BadRequestError:
        return overflow(self.tokens(call))

    def answer(self, call: ModelCall) -> ModelStep:
        session = self.watched.session if self.watched is not None else None
        tokens = self.tokens(call)
        self.seen.append(
            Seen(
                list(call.input),
                tokens,
                session.usage.status if session else UsageStatus.NO_CONFIRMED_USAGE,
                session.usage.baseline if session else None,
                len(session.state.records) if session else 0,
            )
        )
        step = len(self.seen)
        reasoning = ResponseReasoningItem(
            id=f"rs_{self.run}{step}",
            type="reasoning",
            summary=[Summary(text=f"Step {step}: the next file to read.", type="summary_text")],
            encrypted_content=f"opaque-{step}",
        )
        if step <= self.calls:
            call_id = f"call_{self.run}{step}"
            output: list[Any] = [
                reasoning,
                function_call("read_file", {"path": f"src/m{step}.py"}, call_id=call_id),
            ]
        else:
            output = [
                reasoning,
                assistant_message("Handlers round in src/m7.py.", item_id=f"msg_{self.run}{step}"),
            ]
        return ModelStep(
            output=output,
            usage=Usage(requests=1, input_tokens=tokens, output_tokens=40, total_tokens=tokens + 40),
        )


def agent(model: ContextKeepModel) -> Agent[Any]:
    return Agent(name="coder", instructions=INSTRUCTIONS, model=model, tools=[read_file])


def kind(item: Any) -> str:
    return str(item.get("type", "message"))


def orphans(items: Sequence[Any]) -> int:
    """Calls without their output plus outputs without their call."""
    calls = {i["call_id"] for i in items if kind(i) == "function_call"}
    outputs = {i["call_id"] for i in items if kind(i) == "function_call_output"}
    return len(calls ^ outputs)


def text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content)


def flat_history(items: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    """The SDK's history, item by item, as what a model sees of it."""
    for item in items:
        if kind(item) == "message":
            yield item["role"], text(item["content"])
        elif kind(item) == "reasoning":
            yield "reasoning", " ".join(s["text"] for s in item["summary"])
        elif kind(item) == "function_call":
            yield "call", item["call_id"], item["name"], item["arguments"]
        else:
            yield "output", item["call_id"], item["output"]


def flat_transcript(messages: Sequence[Message]) -> Iterator[tuple[Any, ...]]:
    """contextkeep's transcript in the same terms."""
    for m in messages:
        if m.role == "tool":
            yield "output", m.tool_call_id, m.text
        elif m.role != "assistant":
            yield m.role, m.text
        else:
            yield from [("reasoning", m.reasoning)] if m.reasoning else []
            yield from [("assistant", m.text)] if m.text else []
            yield from (("call", c.id, c.name, c.arguments) for c in m.tool_calls)


def assert_within_window(provider: Provider) -> None:
    for seen in provider.seen:
        assert seen.tokens <= BUDGET
        assert orphans(seen.items) == 0


def assert_baselines(provider: Provider, first: int = 1) -> None:
    """Between compactions, every call starts from the previous reply's confirmed usage."""
    for before, seen in zip(provider.seen[first - 1 :], provider.seen[first:], strict=False):
        if seen.compactions == before.compactions:
            assert seen.status is UsageStatus.CONFIRMED_BASELINE
            assert seen.baseline == before.tokens + 40


def assert_originals(provider: Provider, history: Sequence[Any]) -> None:
    """Reasoning items and calls reach the model as the run's own items; masked outputs keep their call."""
    originals = {(kind(item), item.get("id")): item for item in history}
    outputs = {item["call_id"]: item["output"] for item in history if kind(item) == "function_call_output"}
    masked = 0
    for seen in provider.seen:
        for item in seen.items:
            if kind(item) in ("reasoning", "function_call"):
                assert item == originals[kind(item), item["id"]]
            elif kind(item) == "function_call_output" and item["output"] != outputs[item["call_id"]]:
                masked += 1
                assert item == {
                    "type": "function_call_output",
                    "call_id": item["call_id"],
                    "output": item["output"],
                }
    assert masked > 0
