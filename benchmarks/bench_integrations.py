"""The time each framework integration adds per model call, as history grows.

For every framework, the same agent runs on an instant scripted model with and without
contextkeep (a no-op hook of the framework's own kind), from histories of 20, 100 and 300
messages, on the in-memory and the SQLite store, counting with DeepSeek's exact
`tokenizer.json`. How each part measures is in its module docstring (`_bench_<framework>.py`).
Every figure is the median over `BENCH_REPEAT` (25 unless set) interleaved pairs of runs, and
each measured run starts on a collected, frozen heap (`_bench_workload.settled`).

    pip install -e '.[dev]'
    [BENCH_REPEAT=25] TIKTOKEN_CACHE_DIR=../shared/tokenizers python benchmarks/bench_integrations.py \
        [--sizes 20,100,300]
        [--only langchain,pydantic-ai,openai-agents,google-adk] [--stores memory,sqlite] [--breakdown]
        [--clock wall|cpu]

`--clock cpu` times each part (and the breakdown) with the CPU time of the thread that runs
the agent (the event loop's) instead of the wall clock: what the integration costs that thread
per call, without the other processes of a shared machine, and without contextkeep's background
writer of tool-result copies (a thread of its own, on another core when there is one). The
wall clock, the default, includes both.

`--breakdown` also prints, per framework at the largest size, where each model call's time goes
(the integration's own conversion and mapping, the engine's sync, prepare and record: see
`_bench_breakdown.py`); its clocks add a little to the figures of that run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import time
import types
from collections.abc import Awaitable, Callable
from typing import Any

import _bench_breakdown
from _bench_breakdown import clocked, table
from _bench_machine import machine_line

PARTS = {
    "langchain": "_bench_langchain",
    "pydantic-ai": "_bench_pydantic_ai",
    "openai-agents": "_bench_openai_agents",
    "google-adk": "_bench_adk",
}
"""Framework → the module that measures it (each exposes `async def run(sizes) -> rows`)."""

CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
"""`--clock` → the clock each part reads as its `time.perf_counter`."""

_OWN = ("noop_ms_per_call", "framework_ms_per_call")
"""The row key that holds the framework's own time per call (parts name it either way)."""


def _table(rows: list[dict[str, Any]], sizes: list[int]) -> str:
    head = "| framework | store | " + " | ".join(f"added ms @ {n}" for n in sizes)
    head += f" | framework's own ms @ {sizes[-1]} |"
    lines = [head, "|" + "---|" * (len(sizes) + 3)]
    keys = sorted({(r["framework"], r["store"]) for r in rows}, key=lambda k: (list(PARTS).index(k[0]), k[1]))
    for framework, store in keys:
        # A part may count its history with the opening request (21 for 20): columns go by order.
        mine = sorted(
            (r for r in rows if (r["framework"], r["store"]) == (framework, store)),
            key=lambda r: r["messages"],
        )
        cells = [f"{r['added_ms_per_call']:.2f}" for r in mine] + ["–"] * (len(sizes) - len(mine))
        last = mine[-1] if mine else None
        own = next((last[k] for k in _OWN if last and k in last), None)
        lines.append(f"| {framework} | {store} | {' | '.join(cells)} | {own if own is not None else '–'} |")
    return "\n".join(lines)


async def main(sizes: list[int], only: list[str], stores: list[str], breakdown: bool, clock: str) -> None:
    """Run the chosen parts one after the other (never side by side: they would share the cores)."""
    rows: list[dict[str, Any]] = []
    steps: list[str] = []
    setattr(_bench_breakdown, "time", types.SimpleNamespace(perf_counter=CLOCKS[clock]))  # noqa: B010
    for framework in only:
        module = importlib.import_module(PARTS[framework])
        setattr(module, "STORES", tuple(stores))  # noqa: B010  # each part loops over its STORES
        setattr(module, "time", types.SimpleNamespace(perf_counter=CLOCKS[clock]))  # noqa: B010
        run: Callable[[list[int]], Awaitable[list[dict[str, Any]]]] = module.run
        part = await run(sizes)
        rows += part
        for row in part:
            print(row, flush=True)
        if breakdown:
            setattr(module, "STORES", ("memory",))  # noqa: B010
            with clocked(framework) as times:
                await run(sizes[-1:])
            steps.append(table(framework, sizes[-1], times))
    print()
    print(machine_line())
    print(f"clock: {clock}")
    print(_table(rows, sizes))
    for lines in steps:
        print()
        print(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20,100,300", help="history lengths, comma-separated")
    parser.add_argument("--only", default=",".join(PARTS), help="frameworks, comma-separated")
    parser.add_argument("--stores", default="memory,sqlite", help="stores, comma-separated")
    parser.add_argument("--breakdown", action="store_true", help="where each call's time goes (memory)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="wall or loop-thread CPU")
    args = parser.parse_args()
    chosen = [f.strip() for f in args.only.split(",") if f.strip()]
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown:
        parser.error(f"unknown framework(s) {unknown}; choose from {sorted(PARTS)}")
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if sorted(set(stores) - {"memory", "sqlite"}):
        parser.error(f"unknown store(s) in {stores}; choose from memory, sqlite")
    asyncio.run(main([int(n) for n in args.sizes.split(",")], chosen, stores, args.breakdown, args.clock))
