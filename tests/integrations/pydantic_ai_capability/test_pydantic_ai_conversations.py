"""Which conversation `ContextKeepCapability` records: the run's own, and a diverging history's."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.function import FunctionModel

from contextkeep._errors import HistoryDivergedError
from contextkeep.integrations.pydantic_ai import ContextKeepCapability
from support.pydantic_ai_harness import LIMITS, TASK, Managers, neutral, provider, read_file, wire


async def test_conversation_follows_the_run_and_a_diverging_history(
    managers: Managers, deepseek_tokenizer: Path
) -> None:
    cm = managers()
    p = provider(deepseek_tokenizer, calls=2)
    capability = ContextKeepCapability(cm)  # no id: each run's own conversation id
    a = Agent(FunctionModel(p), capabilities=[capability])
    a.tool_plain(read_file)
    first = await a.run(TASK, conversation_id="run-a", usage_limits=LIMITS)
    assert wire((await capability.session("run-a")).transcript) == wire(neutral(first.all_messages()))
    # A history without the latest reply (another branch) does not continue the transcript:
    # a typed error, or a fork of its own.
    edited = first.all_messages()[:-1]
    with pytest.raises(HistoryDivergedError):
        await a.run("Go on.", message_history=edited, conversation_id="run-a", usage_limits=LIMITS)
    forking = ContextKeepCapability(cm, conversation_id="run-a", fork=True)
    b = Agent(FunctionModel(p), capabilities=[forking])
    b.tool_plain(read_file)
    await b.run("Go on.", message_history=edited, usage_limits=LIMITS)
    assert (await forking.session()).conversation_id.startswith("run-a~fork-")
    assert len((await capability.session("run-a")).transcript) == len(neutral(first.all_messages()))
