"""What every part of `bench_integrations.py` runs on: one model, one tokenizer, one tool output.

The four frameworks are compared on the same workload, so the time contextkeep adds per call
(tokenizing each new tool result is part of it) differs only by what the integration does.
"""

from __future__ import annotations

import gc
import os
import statistics
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import product
from pathlib import Path
from typing import Any, NamedTuple

from contextkeep import ContextManager, ModelSpec

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DEEPSEEK_TOKENIZER = SHARED / "tokenizers" / "deepseek_tokenizer.json"
SPEC = ModelSpec("deepseek-chat", context_window=131_072, max_output_tokens=8_192)
"""A window large enough that no compaction runs: the figures are the steady per-call cost."""
CALLS = 10
"""Model calls per timed run (plus the final answer)."""
REPEAT = int(os.environ.get("BENCH_REPEAT", "25"))
"""Runs with and without contextkeep per row, interleaved (the `BENCH_REPEAT` variable sets it)."""
STORES = ("memory", "sqlite")
"""The stores measured (`bench_integrations.py --stores` chooses)."""


def tool_output(n: int) -> str:
    """About 2 KB of a tool's output (36 lines of code), different for every `n`."""
    return "\n".join(
        f"{n:04d}:{i:02d} def handler_{i}(request): return cache.get(key_{n}_{i})" for i in range(36)
    )


@contextmanager
def settled() -> Iterator[None]:
    """The measured turn on a settled heap: collected, and what exists before it frozen.

    A full collection walks every object of the process (the framework's session, each run's
    leftovers) and lands in one run or another by chance; each one cost more than a call
    (130-170 ms at 300 messages). Frozen, the objects made before the turn are left out of
    collections, so a run is timed on what it does itself; the young objects it makes are
    still collected as they would be.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def added_ms(with_ck: Sequence[float], without: Sequence[float]) -> float:
    """The ms contextkeep adds per call: the median of the paired runs' differences.

    The runs alternate, so each pair shares the machine's load of the moment, and the median
    leaves out the pairs a collection or another process happened to hit.
    """
    return ms(w - o for w, o in zip(with_ck, without, strict=True))


def ms(seconds: Iterable[float]) -> float:
    """The median of `seconds`, in ms."""
    return round(statistics.median(seconds) * 1000, 2)


class Pair(NamedTuple):
    """One interleaved pair of timed runs, each continuing a history for `CALLS` more tool calls."""

    messages: int
    """The history's length when the runs start."""
    without: float
    """Seconds per call of the agent with a no-op hook."""
    with_ck: float
    """Seconds per call of the same agent with contextkeep."""
    first: float
    """Seconds of the contextkeep run's first call, which syncs and counts the whole history."""
    inside: float | None = None
    """Seconds per call spent inside contextkeep's hooks, where the part measures it."""


Measure = Callable[[ContextManager, int, str], Awaitable[Pair]]
"""A part's pair of runs: (manager, history size, a conversation id of its own) -> `Pair`."""


async def measured_rows(
    framework: str, sizes: Sequence[int], stores: Sequence[str], measure: Measure, *, inside: str = ""
) -> list[dict[str, Any]]:
    """One row per store and history size: `REPEAT` pairs on one manager, their medians.

    `inside` names the row key for the time inside the hooks (left out when empty).
    """
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for store, n in product(stores, sizes):
            url = "memory://" if store == "memory" else f"sqlite:///{folder / f'bench-{n}.db'}"
            tokenizer = f"hf:{DEEPSEEK_TOKENIZER}"
            cm = ContextManager(SPEC, store=url, workspace=folder / "ws", tokenizer=tokenizer)
            pairs = [await measure(cm, n, f"bench-{store}-{n}-{r}") for r in range(REPEAT)]
            await cm.close()
            rows.append(_row(framework, store, pairs, inside))
    return rows


def _row(framework: str, store: str, pairs: Sequence[Pair], inside: str) -> dict[str, Any]:
    row: dict[str, Any] = {
        "framework": framework,
        "messages": pairs[0].messages,
        "store": store,
        "added_ms_per_call": added_ms([p.with_ck for p in pairs], [p.without for p in pairs]),
    }
    if inside:
        row[inside] = ms(p.inside or 0.0 for p in pairs)
    return row | {
        "framework_ms_per_call": ms(p.without for p in pairs),
        "first_call_ms": ms(p.first for p in pairs),
    }
