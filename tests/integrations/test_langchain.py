"""LangChain v1: `ContextKeepMiddleware` under a real `create_agent` loop on a LangChain chat model.

The model is a `BaseChatModel` subclass (LangChain's own pattern for test models) scripted like a
provider: it calls a tool that returns ~20 KB, counts every prompt it receives with the exact
DeepSeek tokenizer, reports that count as `usage_metadata`, enforces its 32,768-token window with
DeepSeek's real overflow error (an `openai.BadRequestError`), and can raise that error once on
purpose. Run as a script, this file is the second process that continues a conversation.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_openai_messages,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._events import Event, ModelCompleted, RecoveryFailed
from contextkeep._formats import from_openai, to_openai
from contextkeep._manager import ContextManager
from contextkeep._offload import LocalWorkspace
from contextkeep._tokens import HFEncoder
from contextkeep.integrations.langchain import ContextKeepMiddleware
from contextkeep.testing._errors import overflow_error
from support import REPO, require_shared

WINDOW = 32_768
MAX_TOKENS = 4_096
SYSTEM = "You are a build engineer. Read the build log part by part, then say why the build fails."
TASK = "Build 4411 fails on the release branch. Find out why."


@tool
def read_log(part: int) -> str:
    """Read one part (about 20 KB) of the build log."""
    lines = []
    for i in range(230):
        digest = hashlib.sha1(f"{part}-{i}".encode()).hexdigest()[:16]
        status = "ok" if i % 13 else "retry"
        lines.append(
            f"{part:03d}.{i:04d} 2024-05-0{part % 9 + 1}T12:{i % 60:02d}:07Z worker-{i % 7} "
            f"step={i * 31 % 97} checksum={digest} status={status}"
        )
    return "\n".join(lines)


@dataclass
class Seen:
    """One request as the model received it."""

    messages: list[BaseMessage]
    tokens: int
    """Exact prompt tokens (system prompt, messages and tools), counted like the provider does."""
    refused: bool = False
    """Answered with the overflow error."""


def overflow(prompt: int) -> openai.BadRequestError:
    """DeepSeek's real overflow answer, raised the way the openai SDK raises it."""
    answer = overflow_error(
        "deepseek", window=WINDOW, prompt=prompt, max_tokens=MAX_TOKENS, total=True, request_id="req-1"
    )
    assert answer is not None
    status, body = answer
    request = httpx.Request("POST", "https://api.deepseek.com/chat/completions")
    response = httpx.Response(status, json=body, request=request)
    # The SDK types its httpx objects by its own httpx build; at run time any httpx response serves.
    return openai.BadRequestError(
        f"Error code: {status} - {body}", response=cast(Any, response), body=body["error"]
    )


class ProviderModel(BaseChatModel):
    """A LangChain chat model scripted like a provider (see the module docstring)."""

    counter: Any
    """The exact tokenizer's prompt counter."""
    tool_calls: int = 62
    """Tool calls made before the final answer."""
    fail_once_at: int | None = None
    """After this many replies, the next request is answered with the overflow error (once)."""
    max_tokens: int = MAX_TOKENS
    seen: list[Seen] = Field(default_factory=list)
    replies: int = 0
    failed: bool = False

    @property
    def _llm_type(self) -> str:
        return "provider-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _reply(self, messages: list[BaseMessage], tools: list[dict[str, Any]] | None) -> AIMessage:
        tokens = self.counter.count_prompt(from_openai(convert_to_openai_messages(messages)), tools)
        seen = Seen(list(messages), tokens)
        self.seen.append(seen)
        if tokens + self.max_tokens > WINDOW:
            seen.refused = True
            raise overflow(tokens)
        if self.replies == self.fail_once_at and not self.failed:
            self.failed = seen.refused = True
            raise overflow(WINDOW - 1_000)  # the provider counts more than we do
        self.replies += 1
        n = self.replies
        if n <= self.tool_calls:
            reply = AIMessage(
                f"Reading part {n}.",
                tool_calls=[{"name": "read_log", "args": {"part": n}, "id": f"call_{n:03d}"}],
            )
        else:
            reply = AIMessage("The build fails because worker-3 retries step 42 until the job times out.")
        out = self.counter.count_text(reply.text + json.dumps([c["args"] for c in reply.tool_calls]))
        reply.usage_metadata = {"input_tokens": tokens, "output_tokens": out, "total_tokens": tokens + out}
        return reply

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages, kwargs.get("tools")))])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        reply = self._reply(messages, kwargs.get("tools"))
        for word in reply.text.split(" "):
            yield ChatGenerationChunk(message=AIMessageChunk(content=word + " "))
        for i, c in enumerate(reply.tool_calls):
            chunk: Any = {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[chunk]))
        yield ChatGenerationChunk(
            message=AIMessageChunk(content="", usage_metadata=reply.usage_metadata, chunk_position="last")
        )


class NoOp(AgentMiddleware):
    """A middleware that leaves every model call as it is."""


@functools.cache
def deepseek() -> HFEncoder:
    """DeepSeek's exact tokenizer, loaded once (a load takes about a second)."""
    return HFEncoder(require_shared("tokenizers", "deepseek_tokenizer.json"))


def open_manager(tmp_path: Path, store: str | None = None, **config: Any) -> ContextManager:
    return ContextManager(
        ModelSpec("deepseek-chat", context_window=WINDOW, max_output_tokens=MAX_TOKENS),
        config=ContextConfig(**config),
        store=store,
        workspace=tmp_path / "ws",
        tokenizer=deepseek(),
        strict_tokenizer=True,
    )


def agent_for(model: ProviderModel, middleware: AgentMiddleware, *, checkpointer: bool = True) -> Any:
    return create_agent(
        model,
        [read_log],
        system_prompt=SYSTEM,
        middleware=[middleware],
        checkpointer=InMemorySaver() if checkpointer else None,
    )


def orphans(messages: Sequence[BaseMessage]) -> int:
    """Tool calls without their result and results without their call."""
    called: set[str] = set()
    answered: set[str] = set()
    strays = 0
    for m in messages:
        if isinstance(m, AIMessage):
            called.update(str(c["id"]) for c in m.tool_calls)
        elif isinstance(m, ToolMessage):
            strays += m.tool_call_id not in called
            answered.add(m.tool_call_id)
    return strays + len(called - answered)


def texts(messages: Sequence[Any]) -> list[str]:
    return [m.text for m in messages]


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 500}


@pytest.fixture
def events() -> list[Event]:
    return []


@pytest.fixture
async def opened() -> AsyncIterator[list[ContextManager | ContextKeepMiddleware]]:
    """Managers and middlewares a test opened, closed after it."""
    items: list[ContextManager | ContextKeepMiddleware] = []
    yield items
    for item in reversed(items):
        if isinstance(item, ContextKeepMiddleware):
            item.close()
        else:
            await item.close()


@pytest.mark.slow
async def test_a_long_tool_loop_stays_in_budget_and_a_second_process_continues_it(
    tmp_path: Path, events: list[Event], opened: list[Any]
) -> None:
    store = f"sqlite:///{tmp_path / 'ck.db'}"
    cm = open_manager(tmp_path, store)
    cm.events.subscribe(events.append)
    model = ProviderModel(counter=cm.new_counter(), fail_once_at=40)
    middleware = ContextKeepMiddleware(cm)
    opened += [cm, middleware]
    state = await agent_for(model, middleware).ainvoke(
        {"messages": [HumanMessage(TASK)]}, config("build-4411")
    )

    # The framework's history holds every message, whole.
    history = state["messages"]
    assert len(history) == 1 + 2 * 62 + 1
    results = [m for m in history if isinstance(m, ToolMessage)]
    assert len(results) == 62 and all(len(m.text) > 19_000 for m in results)
    assert history[-1].text.startswith("The build fails because")

    # Every request was within the budget (exact count) and pair-safe; compaction happened.
    session = await middleware.session("build-4411")
    budget = session.budget(MAX_TOKENS)
    # The system prompt travels beside the messages and counts in the budget.
    assert budget.outside > 0 and budget.effective == WINDOW - MAX_TOKENS - budget.outside
    limit = WINDOW - MAX_TOKENS
    assert len(model.seen) == 62 + 1 + 1  # one request was answered with the overflow error
    assert all(seen.tokens <= limit for seen in model.seen)
    assert all(orphans(seen.messages) == 0 for seen in model.seen)
    assert max(len(seen.messages) for seen in model.seen) < len(history) / 2
    kinds = [e.type for e in events]
    assert kinds.count("context.compression.completed") >= 2

    # The overflow was compacted (layer 4) and the same call made again, smaller.
    assert [i for i, seen in enumerate(model.seen) if seen.refused] == [40]
    refused, retried = model.seen[40], model.seen[41]
    assert retried.tokens < refused.tokens and retried.messages[-1] == refused.messages[-1]
    assert kinds.count("model.recovery.started") == kinds.count("model.recovery.succeeded") == 1

    # What the view left as it was is the state's own objects; what it masked is new messages.
    last = model.seen[-1].messages
    ids = {id(m) for m in history}
    assert last[1] is history[0]  # the task (after LangChain's system message)
    assert all(id(m) in ids for m in last if isinstance(m, AIMessage))
    assert any(isinstance(m, ToolMessage) and id(m) not in ids for m in last)

    # Every reply's usage reached the baseline, between the compactions too.
    completed = [e for e in events if isinstance(e, ModelCompleted)]
    assert len(completed) == 63
    assert all(e.usage_status == "CONFIRMED_BASELINE" for e in completed)
    answered = [seen.tokens for seen in model.seen if not seen.refused]
    assert [e.input_tokens for e in completed] == answered
    assert session.usage.status == "CONFIRMED_BASELINE"

    # contextkeep's transcript is that history.
    assert texts(session.transcript) == texts(history)

    # A second process on the same store and thread builds the byte-identical view, then continues.
    tools = [convert_to_openai_tool(read_log)]
    here = json.dumps((await session.current_view(tools=tools)).messages, ensure_ascii=False)
    history_file = tmp_path / "history.json"
    history_file.write_text(json.dumps(messages_to_dict(history)))
    out = second_process(tmp_path, store, history_file)
    assert out["view"] == here
    assert out["first_request"] == here  # what its model saw first: that view, and the new question
    assert out["first_request_tokens"] <= limit and out["orphans"] == 0
    assert out["history"] == len(history) + 1 + 2 * 2 + 1
    assert out["transcript"] == out["history"] and out["conversation_id"] == "build-4411"


@pytest.mark.parametrize("blocking", [False, True], ids=["astream", "stream"])
async def test_streaming_runs_stream_every_call_through_the_view(
    tmp_path: Path, opened: list[Any], blocking: bool
) -> None:
    cm = open_manager(tmp_path)
    model = ProviderModel(counter=cm.new_counter(), tool_calls=24)
    middleware = ContextKeepMiddleware(cm)
    opened += [cm, middleware]
    agent = agent_for(model, middleware)
    run = {"messages": [HumanMessage(TASK)]}
    if blocking:  # agent.stream: the engine on its worker loop, each model call in this thread
        chunks = await asyncio.to_thread(lambda: list(agent.stream(run, config("t"), stream_mode="messages")))
    else:
        chunks = [c async for c in agent.astream(run, config("t"), stream_mode="messages")]
    streamed = [m for m, _ in chunks if isinstance(m, AIMessageChunk)]
    assert len(streamed) > 4 * 25  # words, tool-call pieces and the usage chunk of every reply
    assert sum(1 for m in streamed if m.tool_call_chunks) == 24
    history = (await agent.aget_state(config("t"))).values["messages"]
    assert len(history) == 1 + 2 * 24 + 1
    assert all(seen.tokens <= WINDOW - MAX_TOKENS and orphans(seen.messages) == 0 for seen in model.seen)
    assert any(len(b.messages) < len(a.messages) for a, b in zip(model.seen, model.seen[1:], strict=False))
    session = await middleware.session("t")
    assert texts(session.transcript) == texts(history)
    assert session.usage.status == "CONFIRMED_BASELINE"
    assert session.usage.input_tokens == model.seen[-1].tokens  # the streamed usage_metadata


async def test_an_overflow_compaction_cannot_fix_reaches_the_caller_as_the_providers_error(
    tmp_path: Path, opened: list[Any], events: list[Event]
) -> None:
    cm = open_manager(tmp_path, max_token_limit_recovery_attempts=0)
    cm.events.subscribe(events.append)
    model = ProviderModel(counter=cm.new_counter(), tool_calls=3, fail_once_at=2)
    middleware = ContextKeepMiddleware(cm)
    opened += [cm, middleware]
    with pytest.raises(openai.BadRequestError, match="maximum context length is 32768 tokens"):
        await agent_for(model, middleware).ainvoke({"messages": [HumanMessage(TASK)]}, config("t"))
    assert [e.reason for e in events if isinstance(e, RecoveryFailed)] == ["attempts_exhausted"]


async def test_other_errors_reach_the_caller_unchanged(tmp_path: Path, opened: list[Any]) -> None:
    class Down(ProviderModel):
        def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
            raise error

    error = openai.APIConnectionError(request=cast(Any, httpx.Request("POST", "https://api.deepseek.com")))
    cm = open_manager(tmp_path)
    middleware = ContextKeepMiddleware(cm)
    opened += [cm, middleware]
    agent = agent_for(Down(counter=cm.new_counter()), middleware)
    with pytest.raises(openai.APIConnectionError) as raised:
        await agent.ainvoke({"messages": [HumanMessage(TASK)]}, config("t"))
    assert raised.value is error
    with pytest.raises(openai.APIConnectionError) as raised:
        await asyncio.to_thread(agent.invoke, {"messages": [HumanMessage(TASK)]}, config("u"))
    assert raised.value is error


async def test_the_conversation_is_the_thread_or_the_one_given(tmp_path: Path, opened: list[Any]) -> None:
    cm = open_manager(tmp_path)
    per_user = ContextKeepMiddleware(cm, conversation_id=lambda request: f"user-{request.runtime.context}")
    fixed = ContextKeepMiddleware(cm, conversation_id="ticket-1001")
    threads = ContextKeepMiddleware(cm)
    opened += [cm, per_user, fixed, threads]
    run = {"messages": [HumanMessage(TASK)]}
    for middleware in (per_user, fixed):
        agent = agent_for(
            ProviderModel(counter=cm.new_counter(), tool_calls=1), middleware, checkpointer=False
        )
        await agent.ainvoke(run, context=7)
    for conversation in ("user-7", "ticket-1001"):
        async with cm.session(conversation) as s:
            assert len(s.transcript) == 4
    agent = agent_for(ProviderModel(counter=cm.new_counter(), tool_calls=1), threads, checkpointer=False)
    with pytest.raises(ValueError, match="thread_id"):
        await agent.ainvoke(run)


async def test_a_thread_continued_by_another_run_appends_only_what_is_new(
    tmp_path: Path, opened: list[Any]
) -> None:
    cm = open_manager(tmp_path)
    middleware = ContextKeepMiddleware(cm)
    opened += [cm, middleware]
    model = ProviderModel(counter=cm.new_counter(), tool_calls=3)
    agent = agent_for(model, middleware)
    await agent.ainvoke({"messages": [HumanMessage(TASK)]}, config("t"))
    # The checkpointer hands the next run equal copies of the messages, not the same objects.
    state = await agent.ainvoke({"messages": [HumanMessage("And part 9?")]}, config("t"))
    session = await middleware.session("t")
    assert len(state["messages"]) == (1 + 2 * 3 + 1) + 2  # the second run: the question and the answer
    assert texts(session.transcript) == texts(state["messages"])
    assert session.conversation_id == "t"


async def test_a_history_that_does_not_continue_the_transcript_continues_in_a_fork(
    tmp_path: Path, opened: list[Any]
) -> None:
    cm = open_manager(tmp_path)
    middleware, its_own = ContextKeepMiddleware(cm), ContextKeepMiddleware(cm)
    opened += [cm, middleware, its_own]
    first = await agent_for(ProviderModel(counter=cm.new_counter(), tool_calls=2), middleware).ainvoke(
        {"messages": [HumanMessage(TASK)]}, config("shared")
    )
    # Another agent (a subagent, a rewritten state) runs on the same thread id with another history.
    other = ProviderModel(counter=cm.new_counter(), tool_calls=1)
    second = await agent_for(other, its_own).ainvoke(
        {"messages": [HumanMessage("Only check part 1.")]}, config("shared")
    )
    assert len(second["messages"]) == 4 and other.seen[0].messages[1].text == "Only check part 1."
    async with cm.session("shared") as s:
        assert texts(s.transcript) == texts(first["messages"])  # the first conversation is as it was


class HeldWorkspace(LocalWorkspace):
    """A workspace whose tool-result copies are held until someone waits for what it owes."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()

    def _replace(self, path: str, data: bytes) -> None:
        self.gate.wait()
        super()._replace(path, data)

    def _replace_many(self, files: Mapping[str, bytes]) -> None:
        self.gate.wait()
        super()._replace_many(files)

    async def flush_pending(self) -> None:
        self.gate.set()
        await super().flush_pending()


async def test_closing_the_blocking_path_writes_the_copies_its_sessions_owe(tmp_path: Path) -> None:
    """A script on `agent.invoke` may remove the workspace right after `close` (the example does)."""
    workspace = HeldWorkspace(tmp_path / "ws")
    cm = ContextManager(
        ModelSpec("deepseek-chat", context_window=WINDOW, max_output_tokens=MAX_TOKENS),
        store="memory://",
        workspace=workspace,
        tokenizer=deepseek(),
    )
    middleware = ContextKeepMiddleware(cm)
    try:
        agent = agent_for(ProviderModel(counter=cm.new_counter(), tool_calls=3), middleware)
        await asyncio.to_thread(agent.invoke, {"messages": [HumanMessage(TASK)]}, config("c"))
        await asyncio.to_thread(middleware.close)
        transcript = (await middleware.session("c")).transcript
        refs = [m.metadata["ck_ref"] for m in transcript if m.role == "tool"]
        assert len(refs) == 3 and all(Path(workspace.locate(ref)).is_file() for ref in refs)
    finally:
        workspace.gate.set()
        await cm.close()


@pytest.mark.slow
def test_the_example_runs_offline() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO / "examples" / "langchain_agent.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr
    assert "the model saw" in run.stdout and "the agent's history" in run.stdout


def second_process(tmp_path: Path, store: str, history_file: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, __file__, str(tmp_path), store, str(history_file)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return cast(dict[str, Any], json.loads(run.stdout.splitlines()[-1]))


async def _continue(tmp_path: Path, store: str, history_file: Path) -> dict[str, Any]:
    """The second process: a new manager on the store, the same thread, the framework's history."""
    cm = open_manager(tmp_path, store)
    session = cm.new_session("build-4411")
    await session.load()
    view = (await session.current_view(tools=[convert_to_openai_tool(read_log)])).messages
    history = messages_from_dict(json.loads(history_file.read_text()))
    model = ProviderModel(counter=cm.new_counter(), tool_calls=2)
    middleware = ContextKeepMiddleware(cm)
    agent = agent_for(model, middleware, checkpointer=False)
    state = await agent.ainvoke(
        {"messages": [*history, HumanMessage("Check two more parts.")]}, config("build-4411")
    )
    continued = await middleware.session("build-4411")
    await cm.close()
    first = to_openai(from_openai(convert_to_openai_messages(model.seen[0].messages[1:-1])))
    return {
        "view": json.dumps(view, ensure_ascii=False),
        "first_request": json.dumps(first, ensure_ascii=False),
        "first_request_tokens": model.seen[0].tokens,
        "orphans": sum(orphans(seen.messages) for seen in model.seen),
        "history": len(state["messages"]),
        "transcript": len(continued.transcript),
        "conversation_id": continued.conversation_id,
    }


if __name__ == "__main__":
    folder, url, saved = sys.argv[1:4]
    print(json.dumps(asyncio.run(_continue(Path(folder), url, Path(saved)))))
