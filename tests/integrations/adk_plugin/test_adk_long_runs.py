"""The ADK plugin over long tool loops: in the window, calls paired, a restarted process continues alike; the example."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.adk.agents import RunConfig

from contextkeep._baseline import UsageStatus
from contextkeep._tokens import PromptCounter
from contextkeep.integrations.adk import ContextKeepPlugin
from support import DEEPSEEK_TOKENIZER, REPO
from support.adk_harness import (
    BUDGET,
    MAX_OUTPUT,
    WINDOW,
    Agent,
    Contents,
    Managers,
    ScriptedModel,
    assert_follows,
    completed,
)


@pytest.mark.slow
async def test_a_long_tool_loop_stays_in_the_window(managers: Managers, billing: PromptCounter) -> None:
    cm = managers()
    usage = completed(cm)
    built, sent = Contents("built"), Contents("sent")  # the request before and after the plugin
    agent = Agent.build(ScriptedModel(billing=billing, calls=60), built, ContextKeepPlugin(cm), sent)
    await agent.start("long")

    await agent.ask("long", "Read the build log, all 60 chunks.")

    seen = agent.model.seen
    assert len(seen) == 61
    assert max(s.billed for s in seen) <= BUDGET
    assert all(s.orphans == 0 for s in seen)
    async with cm.session("long") as s:
        events = await assert_follows(s, agent, "long")
    assert len(events) == 1 + 61 + 60  # the user, every reply, every result: nothing was rewritten
    everything = len(json.dumps([e.content.model_dump(mode="json", exclude_none=True) for e in events]))
    assert seen[-1].messages < 61 and len(seen[-1].contents) < everything / 20  # 122 messages, 1.2 MB
    # Unchanged contents are ADK's own objects (thought signatures and the like survive); the rest are new.
    for adk, view in zip(built.requests, sent.requests, strict=True):
        own = [c for c in view if any(c is a for a in adk)]
        assert own and all(c.model_dump() not in [a.model_dump() for a in adk] for c in view if c not in own)
    # Every reply's usage became the confirmed baseline, at the provider's own prompt count.
    assert [u.input_tokens for u in usage] == [s.billed for s in seen]
    assert {u.usage_status for u in usage} == {UsageStatus.CONFIRMED_BASELINE}


@pytest.mark.slow
async def test_parallel_calls_streamed_stay_paired(managers: Managers, billing: PromptCounter) -> None:
    cm = managers()
    usage = completed(cm)
    agent = Agent.build(ScriptedModel(billing=billing, calls=30, parallel=2), ContextKeepPlugin(cm))
    await agent.start("parallel")

    streamed = await agent.ask(
        "parallel", "Read 60 chunks, two at a time.", RunConfig.model_validate({"streaming_mode": "sse"})
    )

    assert any(e.partial for e in streamed)
    seen = agent.model.seen
    assert len(seen) == 31 and all(s.orphans == 0 for s in seen) and max(s.billed for s in seen) <= BUDGET
    last = json.loads(seen[-1].contents)
    results = [n for c in last if (n := sum("function_response" in p for p in c["parts"]))]
    assert len(last) < 40 and len(results) > 3 and set(results) == {2}  # each round's two results together
    async with cm.session("parallel") as s:
        events = await assert_follows(s, agent, "parallel")
    assert len(events) == 1 + 31 + 30 and len(s.transcript) == 1 + 31 + 60
    assert len(usage) == 31  # the streamed chunks before each reply are not replies


@pytest.mark.slow
async def test_a_restarted_process_continues_with_the_same_views(
    tmp_path: Path, managers: Managers, billing: PromptCounter
) -> None:
    """Two runs of one two-turn task: one process throughout, or a new one (same store) for turn 2."""
    turns = ["Read the first 30 chunks.", "Now read 30 more."]
    one = Agent.build(
        ScriptedModel(billing=billing, calls=30), ContextKeepPlugin(managers("a", store(tmp_path / "a")))
    )
    await one.start("restart")
    for text in turns:
        await one.ask("restart", text)

    first = managers("b", store(tmp_path / "b"))
    before = Agent.build(ScriptedModel(billing=billing, calls=30), ContextKeepPlugin(first))
    await before.start("restart")
    await before.ask("restart", turns[0])
    async with first.session("restart") as s:
        view = json.dumps((await s.current_view()).messages)
    assert another_process_view(tmp_path / "b", "restart") == view
    second = managers("b", store(tmp_path / "b"))  # a new manager: nothing in memory
    after = Agent.build(before.model, ContextKeepPlugin(second), sessions=before.sessions)
    await after.ask("restart", turns[1])

    assert [s.contents for s in before.model.seen] == [s.contents for s in one.model.seen]
    assert len(one.model.seen) == 62 and max(s.billed for s in one.model.seen) <= BUDGET
    async with second.session("restart") as s:
        await assert_follows(s, after, "restart")


def store(folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'ck.db'}"


def another_process_view(folder: Path, conversation_id: str) -> str:
    """The view a separate Python process builds from the same store."""
    script = (
        "import asyncio, json, sys\n"
        "from contextkeep import ContextManager, ModelSpec\n"
        "async def main():\n"
        f"    cm = ContextManager(ModelSpec('deepseek-chat', {WINDOW}, {MAX_OUTPUT}), store=sys.argv[1],"
        " workspace=sys.argv[2], tokenizer='hf:' + sys.argv[3])\n"
        "    async with cm.session(sys.argv[4]) as s:\n"
        "        print(json.dumps((await s.current_view()).messages))\n"
        "asyncio.run(main())\n"
    )
    argv = [store(folder), str(folder / "ws"), str(DEEPSEEK_TOKENIZER), conversation_id]
    done = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip()


@pytest.mark.slow
def test_the_example_runs_offline() -> None:
    env = {**os.environ, "ADK_DISABLE_LOAD_DOTENV": "1"}
    env.pop("GOOGLE_API_KEY", None)
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "adk_agent.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("call  1: the model saw   1 contents")
    assert "call 41:" in done.stdout and "layers run: L1" in done.stdout
