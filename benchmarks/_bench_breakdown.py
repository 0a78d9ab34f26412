"""Where an integration's time per model call goes: `bench_integrations.py --breakdown`.

Wraps the steps of every model call in `time.perf_counter` clocks (a profiler's hooks would cost
more than these steps do): the integration's own conversion of the framework's history, the
engine's `Session.sync` / `prepare` / `record`, and the mapping of the view back onto the
framework's objects. Each row is the median of the step's times, times how often it runs per
model call, so the first call of each run (which syncs and counts the whole history once) does
not count. Steps nest: `Session.sync` holds the append of the new messages.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["clocked", "table"]

STEPS: dict[str, list[tuple[str, str | None, str, str]]] = {
    "langchain": [
        ("contextkeep.integrations.langchain", "_Conversation", "history", "convert the history"),
        ("contextkeep.integrations.langchain", "_Conversation", "messages", "map the view back"),
    ],
    "pydantic-ai": [
        ("contextkeep.integrations._pydantic_ai_messages", "Converter", "convert", "convert the history"),
        ("contextkeep.integrations._bridge", "Origins", "map_view", "map the view back"),
        ("contextkeep.integrations._pydantic_ai_messages", "Converter", "from_view", "map the view back"),
    ],
    "openai-agents": [
        ("contextkeep.integrations._openai_agents_items", "ItemHistory", "convert", "convert the history"),
        ("contextkeep.integrations.openai_agents", "ContextKeepModel", "_request", "map the view back"),
    ],
    "google-adk": [
        ("contextkeep.integrations._adk_contents", "History", "convert", "convert the history"),
        ("contextkeep.integrations._adk_view", "Rebuilt", "contents", "map the view back"),
    ],
}
"""Per framework: (module, class (None: the module's function), name, step) of its own steps."""

ENGINE: list[tuple[str, str | None, str, str]] = [
    ("contextkeep._session", "Session", "sync", "Session.sync (engine)"),
    ("contextkeep._continuation", "StableIds", "__call__", "in Session.sync: stable call ids"),
    ("contextkeep._session", "Session", "prepare", "Session.prepare (engine)"),
    ("contextkeep._session", "Session", "record", "Session.record (engine)"),
]


def _clock(times: list[float], fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                times.append(time.perf_counter() - start)

        return timed

    @functools.wraps(fn)
    def timed_sync(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            times.append(time.perf_counter() - start)

    return timed_sync


@contextmanager
def clocked(framework: str) -> Iterator[dict[str, list[float]]]:
    """Clock the steps of `framework`'s model calls while inside; yields step -> seconds per run."""
    times: dict[str, list[float]] = defaultdict(list)
    undo: list[tuple[object, str, Any]] = []
    for module, owner, name, step in [*STEPS[framework], *ENGINE]:
        found = importlib.import_module(module)
        holder = found if owner is None else getattr(found, owner)
        original = inspect.getattr_static(holder, name)
        undo.append((holder, name, original))
        setattr(holder, name, _clock(times[f"{step}: {owner or module}.{name}"], original))
    try:
        yield times
    finally:
        for holder, name, original in undo:
            setattr(holder, name, original)


def table(framework: str, messages: int, times: dict[str, list[float]]) -> str:
    """The step times as markdown rows, in ms per model call: from the median, and from the best
    time (what the step costs on a machine nothing else is using)."""
    calls = len(times["Session.prepare (engine): Session.prepare"]) or 1
    lines = [f"| {framework} @ {messages} | step | ms per call | best |", "|---|---|---|---|"]
    for step, seconds in times.items():
        if seconds:
            runs = len(seconds) / calls
            median, best = statistics.median(seconds) * runs * 1e3, min(seconds) * runs * 1e3
            lines.append(f"| | {step} | {median:.3f} | {best:.3f} |")
    return "\n".join(lines)
