"""`ContextKeepModel` over long `Runner` tool loops: in the window, recovered, streamed, continued by a fresh process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.testing import ScriptedModel

from contextkeep._baseline import UsageStatus
from contextkeep._events import RecoverySucceeded
from contextkeep.integrations.openai_agents import ContextKeepModel
from support import REPO
from support.openai_agents_harness import (
    TASK,
    Provider,
    agent,
    assert_baselines,
    assert_originals,
    assert_within_window,
    flat_history,
    flat_transcript,
    kind,
    source_file,
)


@pytest.mark.slow
async def test_sixty_tool_calls_stay_in_the_window(tmp_path: Path, manager: Any, counter: Any) -> None:
    cm = manager(tmp_path / "agent.db")
    recovered: list[RecoverySucceeded] = []
    cm.events.subscribe(recovered.append, RecoverySucceeded.type)
    model = ContextKeepModel(ScriptedModel(), cm, conversation_id="ticket-1")
    provider = Provider(counter, calls=60, watched=model, overflow_at=30)
    model.model = provider.model

    result = await Runner.run(agent(model), TASK, max_turns=200)

    assert result.final_output == "Handlers round in src/m7.py."
    history: list[Any] = result.to_input_list()
    # The SDK's own history holds every item: 60 calls, 60 whole 20 KB outputs, each reasoning item.
    assert sum(kind(i) == "function_call" for i in history) == 60
    assert [i["output"] for i in history if kind(i) == "function_call_output"] == [
        source_file(f"src/m{k}.py") for k in range(1, 61)
    ]
    assert sum(kind(i) == "reasoning" for i in history) == 61
    assert list(flat_transcript(model.session.transcript)) == list(flat_history(history))
    # Every request fit, with no orphan; the views were compacted far below the history.
    assert len(provider.seen) == 61
    assert_within_window(provider)
    largest = max(len(json.dumps(seen.items)) for seen in provider.seen)
    assert largest < len(json.dumps(history)) / 10
    assert_baselines(provider)
    assert_originals(provider, history)
    # Step 30 was refused once with the provider's overflow and made again after compacting.
    assert len(provider.model.calls) == 62
    assert [r.attempt for r in recovered] == [1]
    assert recovered[0].tokens_after < recovered[0].tokens_before
    assert model.session.usage.status is UsageStatus.CONFIRMED_BASELINE


@pytest.mark.slow
async def test_a_fresh_process_continues_with_a_byte_identical_view(
    tmp_path: Path, manager: Any, counter: Any
) -> None:
    cm = manager(tmp_path / "agent.db")
    model = ContextKeepModel(Provider(counter, calls=20).model, cm, conversation_id="ticket-2")
    first = await Runner.run(agent(model), TASK, max_turns=100)
    for suffix in ("", "-wal", "-shm"):  # the database as the running process sees it
        if (tmp_path / f"agent.db{suffix}").exists():
            shutil.copy(tmp_path / f"agent.db{suffix}", tmp_path / f"copy.db{suffix}")
    fresh = ContextKeepModel(ScriptedModel(), manager(tmp_path / "copy.db"), conversation_id="ticket-2")
    await fresh.session.load()
    before, after = await model.session.current_view(), await fresh.session.current_view()
    assert json.dumps(after.messages).encode() == json.dumps(before.messages).encode()

    # Both continue the same run the same way: the requests their models receive are byte-identical.
    follow_up: list[Any] = [
        *first.to_input_list(),
        {"role": "user", "content": "Now check the tests folder too."},
    ]
    providers = []
    for wrapper in (model, fresh):
        provider = Provider(counter, calls=5, watched=wrapper, run="b")
        wrapper.model = provider.model
        await Runner.run(agent(wrapper), follow_up, max_turns=100)
        providers.append(provider)
    warm, cold = ([json.dumps(seen.items) for seen in p.seen] for p in providers)
    assert cold == warm
    assert_within_window(providers[1])
    assert_baselines(providers[1], first=2)


async def test_a_streamed_run_streams_and_recovers(tmp_path: Path, manager: Any, counter: Any) -> None:
    cm = manager(tmp_path / "agent.db")
    model = ContextKeepModel(ScriptedModel(), cm, conversation_id="ticket-3")
    provider = Provider(counter, calls=20, watched=model, overflow_at=12)
    model.model = provider.model

    run = Runner.run_streamed(agent(model), TASK, max_turns=100)
    kinds = [event.data.type async for event in run.stream_events() if event.type == "raw_response_event"]

    assert run.final_output == "Handlers round in src/m7.py."
    assert kinds.count("response.completed") == 21
    assert kinds.count("response.function_call_arguments.delta") == 20
    history = run.to_input_list()
    assert list(flat_transcript(model.session.transcript)) == list(flat_history(history))
    assert_within_window(provider)
    assert_baselines(provider)
    assert all(call.streamed for call in provider.model.calls)
    assert len(provider.model.calls) == 22  # step 12 refused once, then made again


@pytest.mark.slow
def test_the_example_runs_offline() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "openai_agents_agent.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "the model saw" in done.stdout
