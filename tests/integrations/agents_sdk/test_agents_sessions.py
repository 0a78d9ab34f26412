"""`ContextKeepSession`: the SDK's session items, stored by contextkeep and read by other instances."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents import Runner
from agents.memory import Session as AgentsSession
from agents.memory import SessionSettings

from contextkeep.integrations.openai_agents import ContextKeepModel, ContextKeepSession
from support.openai_agents_harness import TASK, Provider, agent, flat_history, flat_transcript


async def test_sessions_persisted_by_contextkeep(tmp_path: Path, manager: Any, counter: Any) -> None:
    cm = manager(tmp_path / "agent.db")
    session = ContextKeepSession(cm, "chat-1")
    assert isinstance(session, AgentsSession)
    model = ContextKeepModel(Provider(counter, calls=2).model, cm, conversation_id="chat-1")
    first = await Runner.run(agent(model), TASK, session=session, max_turns=20)
    assert await session.get_items() == first.to_input_list()

    # The next run starts from the stored items; contextkeep's transcript follows the same history.
    model.model = Provider(counter, calls=1, run="b").model
    second = await Runner.run(agent(model), "And in the tests?", session=session, max_turns=20)
    items = await session.get_items()
    assert items == second.to_input_list()
    assert list(flat_transcript(model.session.transcript)) == list(flat_history(items))

    # Another instance on the same store reads them; limits, pop and clear work as the SDK means.
    other = ContextKeepSession(manager(tmp_path / "agent.db"), "chat-1")
    assert await other.get_items() == items
    assert await other.get_items(limit=2) == items[-2:]
    limited = ContextKeepSession(cm, "chat-1", session_settings=SessionSettings(limit=3))
    assert await limited.get_items() == items[-3:]
    assert await other.pop_item() == items[-1]
    assert await session.get_items() == items[:-1]
    await session.clear_session()
    assert await other.get_items() == []
    assert await other.pop_item() is None
