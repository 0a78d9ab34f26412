"""How the benchmarks drive a library on a conversation and time it; contextkeep driven so.

A `Subject` is one library on one conversation: `check` (the count-and-decide step before a model
call) and `compact` (one pass) are the timed operations, everything else (appending, conversion,
resizing) is not. The stubs that stand for an LLM answer instantly and the time spent inside them
is subtracted from every timing (`CLOCK`, `timed`). The comparison libraries are in `_bench_anchors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import inspect
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._events import CompressionCompleted, Event
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._offload import LocalWorkspace
from contextkeep._session import Session
from contextkeep._summarizers import SummaryRequest, SummaryResult
from contextkeep._tokens import PromptCounter
from contextkeep.replay.trajectories import Trajectory

HUGE_WINDOW = 10_000_000
"""Context window for the per-call figure: far above every trigger, so nothing compacts."""
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


@contextlib.contextmanager
def profiling() -> Iterator[cProfile.Profile]:
    """Inside the block, every `timed` step (and nothing else) runs under the profiler it yields."""
    profiler = cProfile.Profile()
    PROFILER.append(profiler)
    try:
        yield profiler
    finally:
        PROFILER.remove(profiler)


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


# A library on a conversation, and contextkeep so driven ---------------------------------------


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
    # Until the pass: nothing compacts while the conversation is rebuilt at the pass's window.
    QUIET: ClassVar[ContextConfig] = ContextConfig(
        warning_threshold=0.96, error_threshold=0.97, critical_threshold=0.98
    )

    def __init__(
        self, trajectory: Trajectory, counter: str, factory: Callable[[], PromptCounter], root: Path
    ) -> None:
        super().__init__(trajectory)
        self.name, self.counter, self._factory = "contextkeep", counter, factory
        self._workspace = LocalWorkspace(root / counter.split(maxsplit=1)[0])  # its own: session ids repeat
        self._stack = contextlib.AsyncExitStack()
        self._opened = 0
        self._fed: list[Message] = []
        """What `extend` added since `open`."""
        self.session: Session | None = None
        self.completed: list[CompressionCompleted] = []
        """Every compaction's report: where its time went (layers, summariser, offload)."""

    async def open(self, window: int, config: ContextConfig | None = None) -> None:
        await self._stack.aclose()
        self._opened += 1
        manager = ContextManager(
            ModelSpec(self.trajectory.model, context_window=window),
            config=config,
            workspace=self._workspace,
            summarizer=StubSummarizer(),
            fallback_summarizer=StubSummarizer(),
            counter_factory=self._factory,
        )
        manager.events.subscribe(self._on_completed, "context.compression.completed")
        self.session = await self._stack.enter_async_context(manager.session(f"bench-{self._opened:05d}"))
        self._fed = []

    def _on_completed(self, event: Event) -> None:
        assert isinstance(event, CompressionCompleted)
        self.completed.append(event)

    def _session(self) -> Session:
        assert self.session is not None, "open() first"
        return self.session

    async def extend(self, messages: Sequence[Message]) -> None:
        await self._session().add(messages)
        self._fed.extend(messages)

    async def tokens(self) -> int:
        view = await self._session().prepare(tools=self.trajectory.tools)
        return view.tokens

    def check(self) -> Awaitable[Any]:
        return self._session().prepare(tools=self.trajectory.tools)

    async def resize(self, window: int) -> None:
        """The same conversation as it stands in a session that had `window` from its start.

        A live session compacts at the window it always had: its results were cut to that
        window's layer-0 limit when they came, its counts are cached and the workspace copies of
        its tool outputs were written in the background as they came. A pass with a new window
        instead would re-derive and recount every message first, and one right after the
        rebuild would wait for every copy.
        """
        messages = self._fed
        await self.open(window, self.QUIET)
        await self.extend(messages)
        await self.tokens()
        await self.idle()
        await self._session().flush()  # the tool outputs' copies, written long before a live pass

    def compact(self) -> Awaitable[Any]:
        return self._session().compress(tools=self.trajectory.tools, **self.PASS_OVERRIDES)

    async def describe(self, result: Any) -> str:
        if result is None:
            return "no pass"
        layers = "+".join(s.compact_layer or "?" for s in result.statuses)
        return f"{layers}, {len(result.view)} msgs / {result.tokens} tok"
