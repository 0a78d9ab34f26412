"""OpenAI Agents SDK: `ContextKeepModel` under a real `agents.Runner` tool loop, and `ContextKeepSession`.

The model is the SDK's own test model, `agents.testing.ScriptedModel`, scripted like a provider
behind a Chat Completions endpoint: each step answers with a reasoning item and a function call
(an answer after the last), reports as usage the exact DeepSeek count of what it received (the
request as the SDK's own Chat Completions converter renders it), and one step can raise OpenAI's
real context-overflow error (`openai.BadRequestError`, code `context_length_exceeded`).
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import Agent, AgentOutputSchema, Runner, function_tool, set_tracing_disabled
from agents.memory import Session as AgentsSession
from agents.memory import SessionSettings
from agents.models.chatcmpl_converter import Converter
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage
from openai.types.responses.response_reasoning_item import ResponseReasoningItem, Summary
from pydantic import BaseModel

from contextkeep._baseline import UsageStatus
from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import ConfigError, HistoryDivergedError
from contextkeep._events import RecoverySucceeded
from contextkeep._formats import from_openai
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._tokens import counter_for_model
from contextkeep.integrations._openai_agents_items import ItemHistory, to_items
from contextkeep.integrations.openai_agents import ContextKeepModel, ContextKeepSession
from contextkeep.testing._errors import overflow_error
from support import REPO

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


@pytest.fixture
async def manager(deepseek_tokenizer: Path) -> AsyncIterator[Callable[..., ContextManager]]:
    """Opens managers on a SQLite store with the exact DeepSeek tokenizer; closes them after the test."""
    opened: list[ContextManager] = []

    def open_manager(store: Path, config: ContextConfig | None = None) -> ContextManager:
        spec = ModelSpec("deepseek-chat", context_window=WINDOW, max_output_tokens=MAX_OUTPUT)
        cm = ContextManager(
            spec,
            store=f"sqlite:///{store}",
            workspace=store.parent / "workspace",
            tokenizer=f"hf:{deepseek_tokenizer}",
            config=config,
        )
        opened.append(cm)
        return cm

    yield open_manager
    for cm in opened:
        await cm.close()


@pytest.fixture
def counter(deepseek_tokenizer: Path) -> Any:
    """The provider's exact DeepSeek counter."""
    return counter_for_model("deepseek-chat", f"hf:{deepseek_tokenizer}")


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


@pytest.mark.slow
async def test_sixty_tool_calls_stay_in_the_window(tmp_path: Path, manager: Any, counter: Any) -> None:
    cm = manager(tmp_path / "agent.db")
    recovered: list[RecoverySucceeded] = []
    cm.events.subscribe(recovered.append, RecoverySucceeded.type)
    model = ContextKeepModel(ScriptedModel(), cm, conversation_id="ticket-1")
    provider = Provider(counter, calls=60, watched=model, overflow_at=30)
    model.model = provider.model

    result = await Runner.run(agent(model), TASK, max_turns=200)

    assert result.final_output == "Handlers round in src/m7.py."
    history: list[Any] = result.to_input_list()
    # The SDK's own history holds every item: 60 calls, 60 whole 20 KB outputs, each reasoning item.
    assert sum(kind(i) == "function_call" for i in history) == 60
    assert [i["output"] for i in history if kind(i) == "function_call_output"] == [
        source_file(f"src/m{k}.py") for k in range(1, 61)
    ]
    assert sum(kind(i) == "reasoning" for i in history) == 61
    assert list(flat_transcript(model.session.transcript)) == list(flat_history(history))
    # Every request fit, with no orphan; the views were compacted far below the history.
    assert len(provider.seen) == 61
    assert_within_window(provider)
    largest = max(len(json.dumps(seen.items)) for seen in provider.seen)
    print(largest, len(json.dumps(history)), max(len(seen.items) for seen in provider.seen), len(history))
    assert largest < len(json.dumps(history)) / 10
    assert_baselines(provider)
    assert_originals(provider, history)
    # Step 30 was refused once with the provider's overflow and made again after compacting.
    assert len(provider.model.calls) == 62
    assert [r.attempt for r in recovered] == [1]
    assert recovered[0].tokens_after < recovered[0].tokens_before
    assert model.session.usage.status is UsageStatus.CONFIRMED_BASELINE


@pytest.mark.slow
async def test_a_fresh_process_continues_with_a_byte_identical_view(
    tmp_path: Path, manager: Any, counter: Any
) -> None:
    cm = manager(tmp_path / "agent.db")
    model = ContextKeepModel(Provider(counter, calls=20).model, cm, conversation_id="ticket-2")
    first = await Runner.run(agent(model), TASK, max_turns=100)
    for suffix in ("", "-wal", "-shm"):  # the database as the running process sees it
        if (tmp_path / f"agent.db{suffix}").exists():
            shutil.copy(tmp_path / f"agent.db{suffix}", tmp_path / f"copy.db{suffix}")
    fresh = ContextKeepModel(ScriptedModel(), manager(tmp_path / "copy.db"), conversation_id="ticket-2")
    await fresh.session.load()
    before, after = await model.session.current_view(), await fresh.session.current_view()
    assert json.dumps(after.messages).encode() == json.dumps(before.messages).encode()

    # Both continue the same run the same way: the requests their models receive are byte-identical.
    follow_up: list[Any] = [
        *first.to_input_list(),
        {"role": "user", "content": "Now check the tests folder too."},
    ]
    providers = []
    for wrapper in (model, fresh):
        provider = Provider(counter, calls=5, watched=wrapper, run="b")
        wrapper.model = provider.model
        await Runner.run(agent(wrapper), follow_up, max_turns=100)
        providers.append(provider)
    warm, cold = ([json.dumps(seen.items) for seen in p.seen] for p in providers)
    assert cold == warm
    assert_within_window(providers[1])
    assert_baselines(providers[1], first=2)


async def test_a_streamed_run_streams_and_recovers(tmp_path: Path, manager: Any, counter: Any) -> None:
    cm = manager(tmp_path / "agent.db")
    model = ContextKeepModel(ScriptedModel(), cm, conversation_id="ticket-3")
    provider = Provider(counter, calls=20, watched=model, overflow_at=12)
    model.model = provider.model

    run = Runner.run_streamed(agent(model), TASK, max_turns=100)
    kinds = [event.data.type async for event in run.stream_events() if event.type == "raw_response_event"]

    assert run.final_output == "Handlers round in src/m7.py."
    assert kinds.count("response.completed") == 21
    assert kinds.count("response.function_call_arguments.delta") == 20
    history = run.to_input_list()
    assert list(flat_transcript(model.session.transcript)) == list(flat_history(history))
    assert_within_window(provider)
    assert_baselines(provider)
    assert all(call.streamed for call in provider.model.calls)
    assert len(provider.model.calls) == 22  # step 12 refused once, then made again


async def test_an_overflow_that_cannot_be_recovered_reaches_the_run_unchanged(
    tmp_path: Path, manager: Any, counter: Any
) -> None:
    config = ContextConfig(compress_on_token_limit_exceeded=False)
    cm = manager(tmp_path / "agent.db", config)
    model = ContextKeepModel(Provider(counter, calls=3, overflow_at=2).model, cm, conversation_id="ticket-4")
    with pytest.raises(openai.BadRequestError) as raised:
        await Runner.run(agent(model), TASK, max_turns=20)
    assert raised.value.code == "context_length_exceeded"


async def test_a_history_that_does_not_continue_raises_or_forks(
    tmp_path: Path, manager: Any, counter: Any
) -> None:
    cm = manager(tmp_path / "agent.db")
    model = ContextKeepModel(Provider(counter, calls=1).model, cm, conversation_id="ticket-5")
    await Runner.run(agent(model), TASK, max_turns=20)
    model.model = Provider(counter, calls=1, run="b").model
    with pytest.raises(HistoryDivergedError):
        await Runner.run(agent(model), "Another task altogether.", max_turns=20)

    model.fork = True
    result = await Runner.run(agent(model), "Another task altogether.", max_turns=20)
    assert model.session.conversation_id.startswith("ticket-5~fork-")
    assert list(flat_transcript(model.session.transcript)) == list(flat_history(result.to_input_list()))


async def test_sessions_persisted_by_contextkeep(tmp_path: Path, manager: Any, counter: Any) -> None:
    cm = manager(tmp_path / "agent.db")
    session = ContextKeepSession(cm, "chat-1")
    assert isinstance(session, AgentsSession)
    model = ContextKeepModel(Provider(counter, calls=2).model, cm, conversation_id="chat-1")
    first = await Runner.run(agent(model), TASK, session=session, max_turns=20)
    assert await session.get_items() == first.to_input_list()

    # The next run starts from the stored items; contextkeep's transcript follows the same history.
    model.model = Provider(counter, calls=1, run="b").model
    second = await Runner.run(agent(model), "And in the tests?", session=session, max_turns=20)
    items = await session.get_items()
    assert items == second.to_input_list()
    assert list(flat_transcript(model.session.transcript)) == list(flat_history(items))

    # Another instance on the same store reads them; limits, pop and clear work as the SDK means.
    other = ContextKeepSession(manager(tmp_path / "agent.db"), "chat-1")
    assert await other.get_items() == items
    assert await other.get_items(limit=2) == items[-2:]
    limited = ContextKeepSession(cm, "chat-1", session_settings=SessionSettings(limit=3))
    assert await limited.get_items() == items[-3:]
    assert await other.pop_item() == items[-1]
    assert await session.get_items() == items[:-1]
    await session.clear_session()
    assert await other.get_items() == []
    assert await other.pop_item() is None


@pytest.mark.slow
def test_the_example_runs_offline() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "openai_agents_agent.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "the model saw" in done.stdout


class Answer(BaseModel):
    """A structured final answer."""

    file: str
    reason: str


async def test_instructions_and_output_schema_count_in_the_budget(
    tmp_path: Path, manager: Any, counter: Any
) -> None:
    scripted = ScriptedModel([[assistant_message('{"file": "src/m7.py", "reason": "round()"}')]])
    model = ContextKeepModel(scripted, manager(tmp_path / "agent.db"), conversation_id="ticket-6")
    structured = Agent(name="coder", instructions=INSTRUCTIONS, model=model, output_type=Answer)
    result = await Runner.run(structured, TASK)
    assert result.final_output == Answer(file="src/m7.py", reason="round()")
    schema = json.dumps(AgentOutputSchema(Answer).json_schema(), ensure_ascii=False, sort_keys=True)
    outside = counter.count_message(Message("system", f"{INSTRUCTIONS}\n\n{schema}"))
    assert model.session.budget().outside == outside > counter.count_message(Message("system", INSTRUCTIONS))


async def test_a_reply_with_no_items_keeps_the_history_continuing(tmp_path: Path, manager: Any) -> None:
    model = ContextKeepModel(ScriptedModel([[]]), manager(tmp_path / "agent.db"), conversation_id="ticket-7")
    first = await Runner.run(agent(model), TASK)
    assert first.final_output == ""
    assert [m.role for m in model.session.transcript] == ["user", "assistant"]  # the empty reply, recorded
    model.model = ScriptedModel([[assistant_message("Handlers round in src/m7.py.")]])
    follow_up: list[Any] = [*first.to_input_list(), {"role": "user", "content": "Please answer."}]
    second = await Runner.run(agent(model), follow_up)
    assert second.final_output == "Handlers round in src/m7.py."
    assert [m.role for m in model.session.transcript] == ["user", "assistant", "user", "assistant"]


async def test_a_server_managed_conversation_is_refused(tmp_path: Path, manager: Any) -> None:
    model = ContextKeepModel(ScriptedModel([[]]), manager(tmp_path / "agent.db"), conversation_id="ticket-8")
    with pytest.raises(ConfigError, match="previous_response_id"):
        await Runner.run(agent(model), TASK, previous_response_id="resp_1")


VARIED: list[dict[str, Any]] = [
    {"role": "developer", "content": "Be brief."},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "See"},
            {"type": "input_image", "image_url": "https://x/a.png", "detail": "low"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Look."}],
        "encrypted_content": "e1",
    },
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "round"},
    },
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Reading.", "annotations": []}],
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c1",
        "name": "read_file",
        "arguments": '{"path": "a"}',
    },
    {
        "type": "computer_call",
        "id": "cc_1",
        "call_id": "c2",
        "action": {"type": "screenshot"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "a = 1"}]},
    {
        "type": "computer_call_output",
        "call_id": "c2",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
    },
    {"type": "mcp_approval_response", "approval_request_id": "ap_1", "approve": True},
    {"role": "user", "content": "Go on."},
]


def test_every_item_converts_back_to_itself() -> None:
    """Without the run's own items at hand (a restarted process), each message gives its items back."""
    converted = ItemHistory().convert(VARIED)
    assert [m.role for m, _ in converted] == ["system", "user", "assistant", "tool", "tool", "user", "user"]
    assert [item for m, _ in converted for item in to_items(m)] == VARIED
    reply = converted[2][0]
    assert [c.id for c in reply.tool_calls] == ["c1", "c2"]
    assert reply.reasoning == "Look." and "Reading." in reply.text and "web_search_call" in reply.text
