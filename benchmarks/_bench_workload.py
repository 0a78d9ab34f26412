"""What every part of `bench_integrations.py` runs on: one model, one tokenizer, one tool output.

The four frameworks are compared on the same workload, so the time contextkeep adds per call
(tokenizing each new tool result is part of it) differs only by what the integration does.
"""

from __future__ import annotations

import gc
import os
import statistics
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from contextkeep import ModelSpec

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DEEPSEEK_TOKENIZER = SHARED / "tokenizers" / "deepseek_tokenizer.json"
SPEC = ModelSpec("deepseek-chat", context_window=131_072, max_output_tokens=8_192)
"""A window large enough that no compaction runs: the figures are the steady per-call cost."""
CALLS = 10
"""Model calls per timed run (plus the final answer)."""
REPEAT = int(os.environ.get("BENCH_REPEAT", "9"))
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
