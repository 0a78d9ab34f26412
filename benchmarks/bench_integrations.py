"""The time each framework integration adds per model call, as history grows.

For every framework, the same agent runs on an instant scripted model with and without
contextkeep (a no-op hook of the framework's own kind), from histories of 20, 100 and 300
messages, on the in-memory and the SQLite store, counting with DeepSeek's exact
`tokenizer.json`. How each part measures is in its module docstring (`_bench_<framework>.py`).

    pip install -e '.[dev]'
    TIKTOKEN_CACHE_DIR=../shared/tokenizers python benchmarks/bench_integrations.py [--sizes 20,100,300]
        [--only langchain,pydantic-ai,openai-agents,google-adk]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
from collections.abc import Awaitable, Callable
from typing import Any

PARTS = {
    "langchain": "_bench_langchain",
    "pydantic-ai": "_bench_pydantic_ai",
    "openai-agents": "_bench_openai_agents",
    "google-adk": "_bench_adk",
}
"""Framework → the module that measures it (each exposes `async def run(sizes) -> rows`)."""

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


async def main(sizes: list[int], only: list[str]) -> None:
    """Run the chosen parts one after the other (never side by side: they would share the cores)."""
    rows: list[dict[str, Any]] = []
    for framework in only:
        run: Callable[[list[int]], Awaitable[list[dict[str, Any]]]] = importlib.import_module(
            PARTS[framework]
        ).run
        part = await run(sizes)
        rows += part
        for row in part:
            print(row, flush=True)
    print()
    print(_table(rows, sizes))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20,100,300", help="history lengths, comma-separated")
    parser.add_argument("--only", default=",".join(PARTS), help="frameworks, comma-separated")
    args = parser.parse_args()
    chosen = [f.strip() for f in args.only.split(",") if f.strip()]
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown:
        parser.error(f"unknown framework(s) {unknown}; choose from {sorted(PARTS)}")
    asyncio.run(main([int(n) for n in args.sizes.split(",")], chosen))
