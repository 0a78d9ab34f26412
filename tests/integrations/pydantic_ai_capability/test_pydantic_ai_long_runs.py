"""`ContextKeepCapability` over long `Agent` runs: in budget, history whole, continued by a second process."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolReturnPart,
)

from contextkeep._baseline import UsageStatus
from support import REPO
from support.pydantic_ai_harness import (
    CALLS,
    CID,
    LIMITS,
    TASK,
    WINDOW,
    Managers,
    agent,
    assert_transcript_is_history,
    neutral,
    provider,
    tool_output,
    wire,
)


@pytest.mark.slow
async def test_long_tool_loop_stays_in_budget_and_history_stays_whole(
    managers: Managers, deepseek_tokenizer: Path
) -> None:
    p = provider(deepseek_tokenizer)
    a, capability = agent(managers(), p)
    result = await a.run(TASK, usage_limits=LIMITS)

    history = result.all_messages()
    assert len(p.requests) == CALLS + 1  # every check passed inside the provider
    # The run's own history holds every message, every tool output whole.
    assert len(history) == 2 + 2 * CALLS
    outputs = [
        part.content
        for m in history
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, ToolReturnPart)
    ]
    assert outputs == [tool_output(n) for n in range(1, CALLS + 1)]
    await assert_transcript_is_history(capability, history)
    # The model got a compacted view: far fewer messages than the history, which is over the window.
    assert len(p.requests[-1]) < len(history) // 2
    assert p.counter.count_prompt(neutral(history)) > WINDOW
    # Usage from every reply reached the baseline (checked at each request, and here for the
    # last); between compactions it was confirmed.
    assert p.baselines >= CALLS // 2
    session = await capability.session()
    assert session.usage.input_tokens == p.returned[-1].usage.input_tokens
    assert session.usage.status is UsageStatus.CONFIRMED_BASELINE
    # Unchanged messages are pydantic-ai's own objects: the responses, thinking signatures and all.
    for request in p.requests:
        for m in request:
            if isinstance(m, ModelResponse):
                assert any(m is r for r in p.returned)


@pytest.mark.slow
async def test_a_second_process_continues_with_a_byte_identical_view(
    tmp_path: Path, managers: Managers, deepseek_tokenizer: Path
) -> None:
    cm = managers()
    first = provider(deepseek_tokenizer, calls=30)
    a, capability = agent(cm, first)
    result = await a.run(TASK, usage_limits=LIMITS)
    saved = ModelMessagesTypeAdapter.dump_json(result.all_messages())
    with sqlite3.connect(tmp_path / "ck.db") as source, sqlite3.connect(tmp_path / "copy.db") as copy:
        source.backup(copy)  # the store as another process finds it (WAL included)

    # A fresh manager on the same store builds the same view, byte for byte.
    restarted = managers(f"sqlite:///{tmp_path / 'copy.db'}")
    fresh = restarted.new_session(CID)
    await fresh.load()
    view = await (await capability.session()).current_view()
    assert wire((await fresh.current_view()).neutral) == wire(view.neutral)

    # Both continue the conversation from the history loaded again from JSON (as a server does):
    # the running process, and the new one. The first request each model gets is the same, and
    # each sends its own loaded objects where the view left them.
    start = len(first.requests)
    again = ModelMessagesTypeAdapter.validate_json(saved)
    await a.run("Now fix it.", message_history=again, usage_limits=LIMITS)
    b = provider(deepseek_tokenizer, calls=0)
    b_agent, _ = agent(restarted, b)
    loaded = ModelMessagesTypeAdapter.validate_json(saved)
    await b_agent.run("Now fix it.", message_history=loaded, usage_limits=LIMITS)
    assert wire(neutral(b.requests[0])) == wire(neutral(first.requests[start]))
    for sent, own in ((first.requests[start], again), (b.requests[0], loaded)):
        kept = [m for m in sent if isinstance(m, ModelResponse)]
        assert kept and all(any(m is h for h in own) for m in kept)


@pytest.mark.slow
def test_example_runs_offline() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "pydantic_ai_agent.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "the model saw" in done.stdout and "history holds" in done.stdout
