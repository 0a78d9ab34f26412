"""What every part of `bench_integrations.py` runs on: one model, one tokenizer, one tool output.

The four frameworks are compared on the same workload, so the time contextkeep adds per call
(tokenizing each new tool result is part of it) differs only by what the integration does.
"""

from __future__ import annotations

from pathlib import Path

from contextkeep import ModelSpec

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DEEPSEEK_TOKENIZER = SHARED / "tokenizers" / "deepseek_tokenizer.json"
SPEC = ModelSpec("deepseek-chat", context_window=131_072, max_output_tokens=8_192)
"""A window large enough that no compaction runs: the figures are the steady per-call cost."""
CALLS = 10
"""Model calls per timed run (plus the final answer)."""
REPEAT = 5
STORES = ("memory", "sqlite")
"""The stores measured (`bench_integrations.py --stores` chooses)."""


def tool_output(n: int) -> str:
    """About 2 KB of a tool's output (36 lines of code), different for every `n`."""
    return "\n".join(
        f"{n:04d}:{i:02d} def handler_{i}(request): return cache.get(key_{n}_{i})" for i in range(36)
    )
