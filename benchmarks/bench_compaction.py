"""Per-call count-and-decide cost and one compaction pass: contextkeep vs AgentScope vs LangChain.

Replays the longest shared trajectory (mini-swe-agent django__django-14997, ~260 messages,
~55k tokens) call by call, driving every library on the same prompts, and prints two figures:

1. **Count-and-decide per call**: the work each library does before every model call when
   the window is large enough that nothing compacts. Median per call over `--repeat` replays,
   reported over the first and the last tenth of the calls. Between two checks the event loop
   idles twice (every library gets both): once standing for the model call, once, after the
   model's response is added, for the tools it asked for.
   - contextkeep: `await session.prepare(tools=...)`. Also printed, for late calls: the `add` of
     the messages before the call (ingest), and what contextkeep does in the two idle loops:
     it counts the masked previews of new tool outputs (`PromptCounter.warm`) while the model
     call is in flight, and counts the model's response while the tools run (`add` schedules it).
   - AgentScope 2.0: `await agent.compress_context()` under its trigger (it counts and returns).
   - LangChain 1.x: `SummarizationMiddleware.before_model(state, runtime)` under its trigger.
2. **One compaction pass** at late calls: the conversation is rebuilt up to the call, checked
   once and the loop idles (warm caches, as in a live session), then the window is set so the
   prompt sits at 85% of it (each library measured with its own counter) and one pass is timed.
   Median over the last tenth of the calls x `--repeat`.
   - contextkeep: `await session.compress(...)` with thresholds lowered so that L1 (masking),
     L2 (dropping) and L3 (summary) all run; offloads go to a `LocalWorkspace` in a temp dir
     (one durable append per pass). `layers ms` is the same pass without waiting for the
     summariser or for I/O (`CompressionCompleted.layers_ms`): the figure the 2 ms target is for.
   - AgentScope: `await agent.compress_context()` over its 0.8 trigger (reserve 0.1 of the window).
   - LangChain: `before_model` with `trigger=("fraction", 0.8)` and the default `keep`.
No real LLM is called: the summariser (contextkeep `Summarizer`, AgentScope chat model,
LangChain chat model) is a stub that answers instantly; the time spent inside the stubs is
subtracted. Converting our messages into each library's types is never timed.

Run it in a separate environment that holds the comparison libraries (from the repo root):

    python -m venv .bench && .bench/bin/pip install -e . -r benchmarks/requirements-compare.txt
    TIKTOKEN_CACHE_DIR=../shared/tokenizers .bench/bin/python benchmarks/bench_compaction.py [--repeat N]

`--messages 2600 --calls-only` repeats the trajectory's rounds (tool call ids renamed) and measures
the per-call figure only, to see how it grows with a much longer history. A comparison library
that is not installed is skipped with a note (contextkeep alone still runs).
`--profile` prints cProfile hot spots of contextkeep's per-call and pass paths.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.util
import inspect
import io
import json
import logging
import math
import os
import pstats
import statistics
import tempfile
import time
import tracemalloc
import warnings
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from contextkeep._capabilities import ModelSpec
from contextkeep._events import CompressionCompleted, Event
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._offload import LocalWorkspace
from contextkeep._session import Session
from contextkeep._summarizers import SummaryRequest, SummaryResult
from contextkeep._tokens import HFEncoder, PromptCounter, TiktokenEncoder, counter_for_model
from contextkeep.replay.trajectories import RecordedCall, Trajectory, load_trajectories

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRAJECTORY = SHARED / "trajectories" / "mini-swe-agent" / "django__django-14997.traj.json"
DEEPSEEK_TOKENIZER = SHARED / "tokenizers" / "deepseek_tokenizer.json"
HUGE_WINDOW = 10_000_000
"""Context window for the per-call figure: far above every trigger, so nothing compacts."""
PASS_FILL = 0.85
"""For a pass, the window is set so the prompt fills this share of it (over every default trigger)."""
STUB_SUMMARY = "stub summary"


# Timing ---------------------------------------------------------------------------------------


class StubClock:
    """Seconds spent inside the stubs, subtracted from every timing."""

    def __init__(self) -> None:
        self.spent = 0.0
        self.calls = 0

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.spent += time.perf_counter() - t0
            self.calls += 1


CLOCK = StubClock()
PROFILER: list[cProfile.Profile] = []
"""When it holds a profiler, only the timed steps run under it."""


async def timed(step: Callable[[], Any]) -> tuple[float, Any]:
    """Run `step` once (awaiting its result if it is awaitable): seconds taken minus stub time, result."""
    profiler = PROFILER[0] if PROFILER else None
    spent = CLOCK.spent
    if profiler is not None:
        profiler.enable()
    t0 = time.perf_counter()
    result = step()
    if inspect.isawaitable(result):
        result = await result
    took = time.perf_counter() - t0 - (CLOCK.spent - spent)
    if profiler is not None:
        profiler.disable()
    return took, result


# The libraries --------------------------------------------------------------------------------


class Subject(ABC):
    """One library driven on a conversation; `check` and `compact` are the timed operations."""

    name: str
    counter: str

    def __init__(self, trajectory: Trajectory) -> None:
        self.trajectory = trajectory

    @abstractmethod
    async def open(self, window: int) -> None:
        """Start an empty conversation with this input window (tokens)."""

    @abstractmethod
    async def extend(self, messages: Sequence[Message]) -> None:
        """Append messages (converted to the library's types; not timed)."""

    @abstractmethod
    async def tokens(self) -> int:
        """The current prompt's tokens by the library's own counter (not timed)."""

    @abstractmethod
    def check(self) -> Awaitable[Any] | Any:
        """The count-and-decide step before a model call."""

    async def idle(self) -> None:
        """The model call between two checks: the event loop runs what the library scheduled."""
        await asyncio.sleep(0)

    @abstractmethod
    async def resize(self, window: int) -> None:
        """Change the input window of the open conversation (not timed)."""

    @abstractmethod
    def compact(self) -> Awaitable[Any] | Any:
        """One compaction pass (the window is already small enough to trigger one)."""

    @abstractmethod
    async def describe(self, result: Any) -> str:
        """What the pass did (not timed)."""


class StubSummarizer:
    """contextkeep `Summarizer` that answers instantly."""

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        with CLOCK.inside():
            return SummaryResult(STUB_SUMMARY)


class ContextKeep(Subject):
    """contextkeep: `Session.prepare` per call, `Session.compress` for a pass."""

    # Lowered so a pass runs L1, L2 and L3: the target is below what masking and dropping reach.
    PASS_OVERRIDES: ClassVar[dict[str, Any]] = {
        "warning_threshold": 0.10,
        "error_threshold": 0.12,
        "target_ratio": 0.05,
    }

    def __init__(
        self, trajectory: Trajectory, counter: str, factory: Callable[[], PromptCounter], root: Path
    ) -> None:
        super().__init__(trajectory)
        self.name, self.counter, self._factory = "contextkeep", counter, factory
        self._workspace = LocalWorkspace(root / counter.split(maxsplit=1)[0])  # its own: session ids repeat
        self._stack = contextlib.AsyncExitStack()
        self._opened = 0
        self._window = HUGE_WINDOW
        self.session: Session | None = None
        self.completed: list[CompressionCompleted] = []
        """Every compaction's report: where its time went (layers, summariser, offload)."""

    async def open(self, window: int) -> None:
        await self._stack.aclose()
        self._opened += 1
        manager = ContextManager(
            ModelSpec(self.trajectory.model, context_window=window),
            workspace=self._workspace,
            summarizer=StubSummarizer(),
            fallback_summarizer=StubSummarizer(),
            counter_factory=self._factory,
        )
        manager.events.subscribe(self._on_completed, "context.compression.completed")
        self.session = await self._stack.enter_async_context(manager.session(f"bench-{self._opened:05d}"))
        self._window = window

    def _on_completed(self, event: Event) -> None:
        assert isinstance(event, CompressionCompleted)
        self.completed.append(event)

    def _session(self) -> Session:
        assert self.session is not None, "open() first"
        return self.session

    async def extend(self, messages: Sequence[Message]) -> None:
        await self._session().add(messages)

    async def tokens(self) -> int:
        view = await self._session().prepare(tools=self.trajectory.tools)
        return view.tokens

    def check(self) -> Awaitable[Any]:
        return self._session().prepare(tools=self.trajectory.tools)

    async def resize(self, window: int) -> None:
        self._window = window

    def compact(self) -> Awaitable[Any]:
        return self._session().compress(
            tools=self.trajectory.tools, max_context_tokens=self._window, **self.PASS_OVERRIDES
        )

    async def describe(self, result: Any) -> str:
        if result is None:
            return "no pass"
        layers = "+".join(s.compact_layer or "?" for s in result.statuses)
        return f"{layers}, {len(result.view)} msgs / {result.tokens} tok"


def _recorded_usage(trajectory: Trajectory) -> dict[int, dict[str, Any]]:
    return {c.index: dict(c.usage) for c in trajectory.calls if c.usage}


class AgentScope(Subject):
    """AgentScope 2.0: `Agent.compress_context` (counts the whole prompt, then summarises if over)."""

    def __init__(self, trajectory: Trajectory) -> None:
        super().__init__(trajectory)
        import agentscope
        from agentscope import message as m
        from agentscope.agent import Agent
        from agentscope.model import ChatModelBase, ChatResponse
        from agentscope.tool import FunctionTool, Toolkit

        self.name, self.counter = f"agentscope {agentscope.__version__}", "bytes/4 (ChatModelBase default)"
        self._m, self._agent_cls, self._toolkit_cls, self._tool_cls = m, Agent, Toolkit, FunctionTool
        summary = json.dumps(dict.fromkeys(_agentscope_summary_fields(), STUB_SUMMARY))

        class StubModel(ChatModelBase):  # type: ignore[misc]  # AgentScope is optional and untyped here
            """Answers every call instantly with the structured summary, never touching the network."""

            async def _call_api(self, model_name: str, messages: list[Any], **kwargs: Any) -> Any:
                with CLOCK.inside():
                    call = m.ToolCallBlock(id="stub", name="generate_structured_output", input=summary)
                    return ChatResponse(content=[call], is_last=True)

        self._model_cls = StubModel
        self.agent: Any = None

    async def open(self, window: int) -> None:
        from agentscope.credential import CredentialBase

        system = next((x.text for x in self.trajectory.messages if x.role == "system"), "")
        model = self._model_cls(CredentialBase(), "stub", None, stream=False, context_size=window)
        toolkit = self._toolkit_cls()
        if self.trajectory.tools:
            fn = self.trajectory.tools[0]["function"]

            def bash(command: str) -> str:
                """Execute a bash command."""
                return command

            await toolkit.add_tool(self._tool_cls(bash, name=fn["name"], input_schema=fn["parameters"]))
        self.agent = self._agent_cls(name="agent", system_prompt=system, model=model, toolkit=toolkit)

    async def extend(self, messages: Sequence[Message]) -> None:
        m, context = self._m, self.agent.state.context
        for x in messages:
            if x.role == "user":
                context.append(m.UserMsg("user", x.text))
            elif x.role == "assistant":
                blocks: list[Any] = [m.TextBlock(text=x.text)] if x.text else []
                blocks += [
                    m.ToolCallBlock(id=c.id, name=c.name, input=c.arguments, state=m.ToolCallState.FINISHED)
                    for c in x.tool_calls
                ]
                context.append(m.AssistantMsg("agent", blocks))
            elif x.role == "tool":  # AgentScope appends a tool result to the assistant message that called it
                name = next(
                    (b.name for b in context[-1].content if getattr(b, "id", None) == x.tool_call_id), "bash"
                )
                context[-1].content.append(
                    m.ToolResultBlock(
                        id=x.tool_call_id or "", name=name, output=x.text, state=m.ToolResultState.SUCCESS
                    )
                )

    async def tokens(self) -> int:
        kwargs = await self.agent._prepare_model_input()
        return int(await self.agent.model.count_tokens(**kwargs))

    def check(self) -> Awaitable[Any]:
        pending: Awaitable[Any] = self.agent.compress_context()
        return pending

    async def resize(self, window: int) -> None:
        self.agent.model.context_size = window

    compact = check

    async def describe(self, result: Any) -> str:
        return f"summary, {len(self.agent.state.context)} msgs / {await self.tokens()} tok"


def _agentscope_summary_fields() -> list[str]:
    from agentscope.agent import ContextConfig

    return list(ContextConfig().summary_schema["properties"])


class LangChain(Subject):
    """LangChain 1.x: `SummarizationMiddleware.before_model` (counts the messages, then summarises)."""

    def __init__(self, trajectory: Trajectory, **options: Any) -> None:
        super().__init__(trajectory)
        import langchain
        from langchain.agents.middleware import SummarizationMiddleware
        from langchain_core.language_models import BaseChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult

        self.name, self.counter = f"langchain {langchain.__version__}", "count_tokens_approximately (default)"
        if options:
            self.name += " (" + ",".join(f"{k.split('_')[0]}={v}" for k, v in options.items()) + ")"
        self._options = {"trigger": ("fraction", 0.8), **options}
        self._middleware_cls = SummarizationMiddleware
        self._usage = _recorded_usage(trajectory)

        class StubChatModel(BaseChatModel):
            """Answers every call instantly, never touching the network."""

            @property
            def _llm_type(self) -> str:
                return "stub-chat"

            def _generate(
                self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any
            ) -> Any:
                with CLOCK.inside():
                    return ChatResult(generations=[ChatGeneration(message=AIMessage(STUB_SUMMARY))])

        self._model_cls = StubChatModel
        self.messages: list[Any] = []
        self.middleware: Any = None
        self._seen = 0

    async def open(self, window: int) -> None:
        self.messages, self._seen = [], 0
        await self.resize(window)

    async def extend(self, messages: Sequence[Message]) -> None:
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

        for x in messages:
            index, self._seen = self._seen, self._seen + 1
            if x.role == "user":
                self.messages.append(HumanMessage(x.text))
            elif x.role == "assistant":
                calls = [{"name": c.name, "args": json.loads(c.arguments), "id": c.id} for c in x.tool_calls]
                usage = self._usage.get(index)
                meta = (
                    {
                        "input_tokens": usage.get("prompt_tokens", 0),
                        "output_tokens": usage.get("completion_tokens", 0),
                        "total_tokens": usage.get("total_tokens", 0),
                    }
                    if usage
                    else None
                )
                self.messages.append(AIMessage(x.text, tool_calls=calls, usage_metadata=meta))
            elif x.role == "tool":
                self.messages.append(ToolMessage(x.text, tool_call_id=x.tool_call_id or ""))
            # the system prompt is not part of a LangChain agent's state messages

    async def tokens(self) -> int:
        return int(self.middleware.token_counter(self.messages))

    def check(self) -> Any:
        return self.middleware.before_model({"messages": self.messages}, None)

    async def resize(self, window: int) -> None:
        self.middleware = self._middleware_cls(
            self._model_cls(profile={"max_input_tokens": window}), **self._options
        )

    compact = check

    async def describe(self, result: Any) -> str:
        if result is None:
            return "no pass"
        kept = result["messages"][1:]  # after RemoveMessage(REMOVE_ALL_MESSAGES)
        summary = kept[0].content
        how = "summary" if summary.endswith(STUB_SUMMARY) else f"no LLM call: {summary.splitlines()[-1]!r}"
        return f"{how}, {len(kept)} msgs / {self.middleware.token_counter(kept)} tok"


# The benchmark --------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table."""

    name: str
    counter: str
    per_call: list[float]
    passes: list[float] = field(default_factory=list)
    effect: str = ""
    adds: list[float] = field(default_factory=list)
    """Seconds of `extend` (contextkeep: `add`, the ingest) before each call, medians per call."""
    during_call: list[float] = field(default_factory=list)
    """Seconds of the idle loop standing for the model call (contextkeep: the background warm-up)."""
    during_tools: list[float] = field(default_factory=list)
    """Seconds of the idle loop standing for the tools (contextkeep: the response counted ahead)."""
    completed: list[CompressionCompleted] = field(default_factory=list)
    """contextkeep: the timed passes' own reports."""


def calls_of(trajectory: Trajectory) -> list[int]:
    """Transcript index of each model call (its prompt is every message before it)."""
    return [c.index for c in trajectory.calls]


@dataclass
class PerCall:
    """Seconds per call (medians over the replays)."""

    checks: list[float]
    """`check`, the figure compared across libraries."""
    adds: list[float]
    """`extend` before it (contextkeep: `add`, the ingest)."""
    during_call: list[float]
    """The idle loop after it, standing for the model call (contextkeep: the background warm-up)."""
    during_tools: list[float]
    """The idle loop after the response is added, standing for the tools (contextkeep: counting ahead)."""


async def replay_per_call(subject: Subject, calls: Sequence[int], repeat: int) -> PerCall:
    """Per call: `extend`, `check`, `idle` (the model), add the response, `idle` (the tools); timed."""
    messages = subject.trajectory.messages
    samples: list[list[list[float]]] = [[[] for _ in calls] for _ in range(4)]
    checks, adds, during_call, during_tools = samples
    for _ in range(repeat):
        await subject.open(HUGE_WINDOW)
        added = 0
        for i, index in enumerate(calls):
            adds[i].append((await timed(lambda: subject.extend(messages[added:index])))[0])  # noqa: B023
            checks[i].append((await timed(subject.check))[0])
            during_call[i].append((await timed(subject.idle))[0])
            await subject.extend(messages[index : index + 1])
            during_tools[i].append((await timed(subject.idle))[0])
            added = index + 1

    def medians(samples: list[list[float]]) -> list[float]:
        return [statistics.median(s) for s in samples]

    return PerCall(*map(medians, samples))


async def compaction_passes(subject: Subject, calls: Sequence[int], repeat: int) -> tuple[list[float], str]:
    """Seconds of one pass at each of `calls`, `repeat` times; and what the last pass did."""
    messages = subject.trajectory.messages
    seconds: list[float] = []
    effect = ""
    for _ in range(repeat):
        for index in calls:
            await subject.open(HUGE_WINDOW)
            await subject.extend(messages[:index])
            before = await subject.tokens()  # also warms caches, as the checks before this call did
            await subject.idle()  # the model call that follows every check
            await subject.resize(math.ceil(before / PASS_FILL))
            took, result = await timed(subject.compact)
            seconds.append(took)
            effect = f"{before} tok -> {await subject.describe(result)}"
    return seconds, effect


async def memory_of_replay(subject: Subject, calls: Sequence[int]) -> tuple[float, float]:
    """tracemalloc peak and retained MiB over one replay (add + check per call)."""
    messages = subject.trajectory.messages
    tracemalloc.start()
    try:
        await subject.open(HUGE_WINDOW)
        added = 0
        for index in calls:
            await subject.extend(messages[added:index])
            await subject.check()
            added = index
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20, current / 2**20


async def profile(subject: Subject, calls: Sequence[int], top: int) -> str:
    """cProfile of the timed steps only: every `check` of one replay, then the late passes."""
    out = io.StringIO()
    for label, run in (
        ("prepare() over one replay (all calls)", lambda: replay_per_call(subject, calls, 1)),
        (
            "compress() passes at late calls",
            lambda: compaction_passes(subject, calls[-len(calls) // 10 :], 1),
        ),
    ):
        PROFILER.append(cProfile.Profile())
        try:
            await run()
        finally:
            profiler = PROFILER.pop()
        out.write(f"\n--- contextkeep {subject.counter}: {label} ---\n")
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def subjects(trajectory: Trajectory, root: Path) -> tuple[list[Subject], list[str]]:
    """Every library that can run here, and a note for each one that cannot."""
    model = trajectory.model
    found: list[Subject] = []
    notes: list[str] = []
    if DEEPSEEK_TOKENIZER.exists():
        encoder = HFEncoder(DEEPSEEK_TOKENIZER)
        found.append(
            ContextKeep(
                trajectory, "deepseek tokenizer.json (exact)", lambda: counter_for_model(model, encoder), root
            )
        )
    else:
        notes.append(f"contextkeep exact: {DEEPSEEK_TOKENIZER} is missing")
    tiktoken = TiktokenEncoder("o200k_base")
    found.append(
        ContextKeep(trajectory, "tiktoken o200k_base", lambda: counter_for_model(model, tiktoken), root)
    )
    # The engine without a tokenizer's cost: what is left is contextkeep's own work.
    found.append(
        ContextKeep(trajectory, "heuristic (engine overhead)", lambda: counter_for_model(model), root)
    )
    comparisons: list[tuple[str, Callable[[], Subject]]] = [
        ("agentscope", lambda: AgentScope(trajectory)),
        ("langchain", lambda: LangChain(trajectory)),
        # The default trim (4000 tokens, start_on="human") leaves nothing to summarise in a
        # single-task agent run, so the model is never called; without it the summary path runs.
        ("langchain", lambda: LangChain(trajectory, trim_tokens_to_summarize=None)),
    ]
    for module, make in comparisons:
        if importlib.util.find_spec(module) is None:
            notes.append(f"{module} is not installed: skipped (see benchmarks/requirements-compare.txt)")
        else:
            found.append(make())
    return found, sorted(set(notes))


def ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1e3


def lengthened(trajectory: Trajectory, messages: int) -> Trajectory:
    """The trajectory with its rounds repeated (after the task) until it holds about `messages` messages.

    Each repetition renames its tool call ids, so every result still answers its own call.
    """
    head, body = trajectory.messages[:2], trajectory.messages[2 : trajectory.calls[-1].index]
    out = list(trajectory.messages[: trajectory.calls[-1].index])
    copy = 0
    while len(out) < messages:
        copy += 1
        for m in body:
            renamed = tuple(replace(c, id=f"{c.id}~{copy}") for c in m.tool_calls)
            answered = f"{m.tool_call_id}~{copy}" if m.tool_call_id else None
            out.append(replace(m, id=None, tool_calls=renamed, tool_call_id=answered))
    calls = [RecordedCall(i, None) for i, m in enumerate(out) if m.role == "assistant" and i >= len(head)]
    return replace(trajectory, messages=out, calls=calls)


async def main_async(args: argparse.Namespace) -> None:
    (trajectory,) = load_trajectories(args.trajectory)
    if args.messages:
        trajectory = lengthened(trajectory, args.messages)
    calls = calls_of(trajectory)
    tenth = max(len(calls) // 10, 1)
    with tempfile.TemporaryDirectory(prefix="bench-compaction-") as tmp:
        found, notes = subjects(trajectory, Path(tmp))
        rows = []
        for subject in found:
            per_call = await replay_per_call(subject, calls, args.repeat)
            completed = subject.completed if isinstance(subject, ContextKeep) else []
            completed.clear()
            passes, effect = (
                ([], "not measured (--calls-only)")
                if args.calls_only
                else await compaction_passes(subject, calls[-tenth:], args.repeat)
            )
            rows.append(
                Row(
                    subject.name,
                    subject.counter,
                    per_call.checks,
                    passes,
                    effect,
                    per_call.adds,
                    per_call.during_call,
                    per_call.during_tools,
                    list(completed),
                )
            )
        memory = await memory_of_replay(found[0], calls)
        profiles = (
            [await profile(s, calls, args.top) for s in found if isinstance(s, ContextKeep)]
            if args.profile
            else []
        )

    print(
        f"trajectory: {args.trajectory.name}  calls: {len(calls)}  messages at the last call: {calls[-1]}  "
        f"repeat: {args.repeat}"
    )
    print(
        f"early = median over calls 1..{tenth}; late = calls {len(calls) - tenth + 1}..{len(calls)}; "
        f"pass = median of {len(rows[0].passes)} passes at late calls (stub time subtracted)"
    )
    header = (
        f"{'library':18} {'counter':36} {'early ms':>9} {'late ms':>9} {'pass ms':>9} {'layers ms':>9}"
        "  pass (last one)"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        early, late = statistics.median(r.per_call[:tenth]), statistics.median(r.per_call[-tenth:])
        layers = f"{statistics.median(e.layers_ms for e in r.completed):9.3f}" if r.completed else f"{'-':>9}"
        passed = f"{ms(r.passes):9.3f}" if r.passes else f"{'-':>9}"
        row = f"{r.name:18} {r.counter:36} {early * 1e3:9.3f} {late * 1e3:9.3f} {passed} {layers}"
        print(f"{row}  {r.effect}")
    print(
        "layers = the pass without waiting for the summariser or for I/O (CompressionCompleted.layers_ms); "
        "pass = the whole compress() call"
    )
    for r in rows:
        if r.completed:
            offload = statistics.median(e.offload_ms for e in r.completed)
            print(
                f"contextkeep ({r.counter}), late calls: add() {ms(r.adds[-tenth:]):.3f} ms, "
                f"in the background: while the model call is in flight {ms(r.during_call[-tenth:]):.3f} ms, "
                f"while the tools run {ms(r.during_tools[-tenth:]):.3f} ms; "
                f"offload per pass (one durable append) {offload:.3f} ms"
            )
    print(
        f"contextkeep ({found[0].counter}) tracemalloc over one replay: "
        f"peak {memory[0]:.1f} MiB, retained {memory[1]:.1f} MiB"
    )
    print("targets: contextkeep exact <= 0.3 ms per call (flat), <= 2 ms per pass without the LLM (layers)")
    for note in notes:
        print(f"note: {note}")
    if args.profile:
        for text in profiles:
            print(text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trajectory", type=Path, default=TRAJECTORY)
    parser.add_argument("--repeat", type=int, default=5, help="replays per library; medians are reported")
    parser.add_argument(
        "--messages", type=int, default=0, help="repeat the trajectory's rounds up to this many messages"
    )
    parser.add_argument("--calls-only", action="store_true", help="skip the compaction passes")
    parser.add_argument("--profile", action="store_true", help="print contextkeep's cProfile hot spots")
    parser.add_argument("--top", type=int, default=25, help="rows per profile")
    args = parser.parse_args()
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tokenizers"))
    logging.disable(logging.WARNING)  # the libraries log every compaction at INFO/WARNING
    warnings.simplefilter("ignore")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
