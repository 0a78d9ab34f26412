"""Conversations with a past, written to a store as an agent would, for the dashboard's replay tests."""

from __future__ import annotations

from pathlib import Path

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._manager import ContextManager
from contextkeep._usage import Usage
from support.builders import call, result

MODEL, WINDOW = "fake-model", 2_000
TOKENIZER = "tiktoken:o200k_base"
CONFIG = ContextConfig(min_keep_tokens=0, reserved_tokens=200)


def log(step: int, lines: int = 40) -> str:
    """A distinct tool output long enough to be cut at ingest (L0) and masked later (L1)."""
    return "\n".join(f"{step}.{i} worker {i} handled request {step * 100 + i}" for i in range(lines))


async def agent_run(store: str, workspace: Path, conversation: str, steps: int) -> None:
    """`steps` recorded tool-calling turns on a 2,000-token window: enough to compact more than once."""
    m = ContextManager(
        ModelSpec(MODEL, WINDOW), config=CONFIG, store=store, workspace=workspace, tokenizer=TOKENIZER
    )
    async with m.session(conversation) as s:
        await s.add([{"role": "system", "content": "You watch logs."}, {"role": "user", "content": "go"}])
        for step in range(steps):
            view = await s.prepare()
            await s.record(call(f"c{step}", f"tail {step}"), Usage(view.tokens, 20))
            await s.add(result(f"c{step}", log(step)))
    await m.close()
