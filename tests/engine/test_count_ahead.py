"""Counting ahead does no work twice: what a view just counted is neither encoded nor counted again."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from contextkeep._capabilities import ModelSpec
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._tokens import HeuristicEncoder, OpenAIFraming, PromptCounter
from contextkeep._tokens.framing import Tools
from support import call, recording_manager, result, rounds

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Fix the failing test in src/app.py"}


class PromptLog(PromptCounter):
    """A heuristic counter remembering how long each prompt it counted was."""

    def __init__(self) -> None:
        super().__init__(HeuristicEncoder(), OpenAIFraming())
        self.prompts: list[int] = []

    def count_prompt(self, messages: Sequence[Message], tools: Tools | None = None) -> int:
        self.prompts.append(len(messages))
        return super().count_prompt(messages, tools)


async def test_a_counted_tool_result_is_not_encoded_again_to_decide_whether_masking_pays(
    tmp_path: Path,
) -> None:
    cm, encoded = recording_manager(tmp_path)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(12, size=2000)])
        await s.prepare()
        await asyncio.sleep(0)  # the model call: its previews are counted ahead, and what masking saves
        outcome = await s.compress(warning_threshold=0.01, target_ratio=0.005, layers=("L1",))
    # Each output was encoded once, whole, inside its message (a preview keeps only its head and tail).
    for i in range(12):
        assert sum(f"HEAD-{i} " + "x" * 1980 in t for t in encoded) == 1
    assert outcome is not None and [x.compact_layer for x in outcome.statuses] == ["L1"]
    assert sum("Full detail available at:" in m.text for m in outcome.view) == 7  # all but the last 5 rounds


async def test_counting_ahead_skips_the_view_prepare_just_counted_but_not_an_append_after(
    tmp_path: Path,
) -> None:
    counter = PromptLog()
    cm = ContextManager(
        ModelSpec("test-model", 100_000), workspace=tmp_path / "ws", counter_factory=lambda: counter
    )
    history = [SYSTEM, TASK, *rounds(3)]
    async with cm.session("c") as s:
        await s.sync(history)
        await s.prepare()
        await s.record(call("c9"))
        history.append(call("c9"))
        await asyncio.sleep(0)  # the tool runs: the reply is counted ahead
        assert counter.prompts[-1] == len(history)
        history.append(result("c9", "a.py"))
        await s.sync(history)  # the framework's next model call: sync, then prepare at once
        counter.prompts.clear()
        await s.prepare()
        for _ in range(3):  # the model call: nothing appended since prepare counted its view
            await asyncio.sleep(0)
    assert counter.prompts == [len(history)]
