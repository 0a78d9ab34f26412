"""`ContextKeepModel` on histories it cannot follow as they are: overflows, divergence, empty replies, server state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from agents import Runner
from agents.testing import ScriptedModel, assistant_message

from contextkeep._config import ContextConfig
from contextkeep._errors import ConfigError, HistoryDivergedError
from contextkeep.integrations.openai_agents import ContextKeepModel
from support.openai_agents_harness import TASK, Provider, agent, flat_history, flat_transcript


async def test_an_overflow_that_cannot_be_recovered_reaches_the_run_unchanged(
    tmp_path: Path, manager: Any, counter: Any
) -> None:
    config = ContextConfig(compress_on_token_limit_exceeded=False)
    cm = manager(tmp_path / "agent.db", config)
    model = ContextKeepModel(Provider(counter, calls=3, overflow_at=2).model, cm, conversation_id="ticket-4")
    with pytest.raises(openai.BadRequestError) as raised:
        await Runner.run(agent(model), TASK, max_turns=20)
    assert raised.value.code == "context_length_exceeded"


async def test_a_history_that_does_not_continue_raises_or_forks(
    tmp_path: Path, manager: Any, counter: Any
) -> None:
    cm = manager(tmp_path / "agent.db")
    model = ContextKeepModel(Provider(counter, calls=1).model, cm, conversation_id="ticket-5")
    await Runner.run(agent(model), TASK, max_turns=20)
    model.model = Provider(counter, calls=1, run="b").model
    with pytest.raises(HistoryDivergedError):
        await Runner.run(agent(model), "Another task altogether.", max_turns=20)

    model.fork = True
    result = await Runner.run(agent(model), "Another task altogether.", max_turns=20)
    assert model.session.conversation_id.startswith("ticket-5~fork-")
    assert list(flat_transcript(model.session.transcript)) == list(flat_history(result.to_input_list()))


async def test_a_reply_with_no_items_keeps_the_history_continuing(tmp_path: Path, manager: Any) -> None:
    model = ContextKeepModel(ScriptedModel([[]]), manager(tmp_path / "agent.db"), conversation_id="ticket-7")
    first = await Runner.run(agent(model), TASK)
    assert first.final_output == ""
    assert [m.role for m in model.session.transcript] == ["user", "assistant"]  # the empty reply, recorded
    model.model = ScriptedModel([[assistant_message("Handlers round in src/m7.py.")]])
    follow_up: list[Any] = [*first.to_input_list(), {"role": "user", "content": "Please answer."}]
    second = await Runner.run(agent(model), follow_up)
    assert second.final_output == "Handlers round in src/m7.py."
    assert [m.role for m in model.session.transcript] == ["user", "assistant", "user", "assistant"]


async def test_a_server_managed_conversation_is_refused(tmp_path: Path, manager: Any) -> None:
    model = ContextKeepModel(ScriptedModel([[]]), manager(tmp_path / "agent.db"), conversation_id="ticket-8")
    with pytest.raises(ConfigError, match="previous_response_id"):
        await Runner.run(agent(model), TASK, previous_response_id="resp_1")
