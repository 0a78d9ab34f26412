"""`ContextKeepMiddleware` over a long `create_agent` tool loop, continued by a second process; the example.

Run as a script, this file is the second process that continues a conversation.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    ToolMessage,
    convert_to_openai_messages,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.utils.function_calling import convert_to_openai_tool

from contextkeep._events import Event, ModelCompleted
from contextkeep._formats import from_openai, to_openai
from contextkeep.integrations.langchain import ContextKeepMiddleware
from support import REPO
from support.langchain_harness import (
    MAX_TOKENS,
    TASK,
    WINDOW,
    ProviderModel,
    agent_for,
    config,
    open_manager,
    orphans,
    read_log,
    texts,
)


@pytest.mark.slow
async def test_a_long_tool_loop_stays_in_budget_and_a_second_process_continues_it(
    tmp_path: Path, events: list[Event], opened: list[Any]
) -> None:
    store = f"sqlite:///{tmp_path / 'ck.db'}"
    cm = open_manager(tmp_path, store)
    cm.events.subscribe(events.append)
    model = ProviderModel(counter=cm.new_counter(), fail_once_at=40)
    middleware = ContextKeepMiddleware(cm)
    opened += [cm, middleware]
    state = await agent_for(model, middleware).ainvoke(
        {"messages": [HumanMessage(TASK)]}, config("build-4411")
    )

    # The framework's history holds every message, whole.
    history = state["messages"]
    assert len(history) == 1 + 2 * 62 + 1
    results = [m for m in history if isinstance(m, ToolMessage)]
    assert len(results) == 62 and all(len(m.text) > 19_000 for m in results)
    assert history[-1].text.startswith("The build fails because")

    # Every request was within the budget (exact count) and pair-safe; compaction happened.
    session = await middleware.session("build-4411")
    budget = session.budget(MAX_TOKENS)
    # The system prompt travels beside the messages and counts in the budget.
    assert budget.outside > 0 and budget.effective == WINDOW - MAX_TOKENS - budget.outside
    limit = WINDOW - MAX_TOKENS
    assert len(model.seen) == 62 + 1 + 1  # one request was answered with the overflow error
    assert all(seen.tokens <= limit for seen in model.seen)
    assert all(orphans(seen.messages) == 0 for seen in model.seen)
    assert max(len(seen.messages) for seen in model.seen) < len(history) / 2
    kinds = [e.type for e in events]
    assert kinds.count("context.compression.completed") >= 2

    # The overflow was compacted (layer 4) and the same call made again, smaller.
    assert [i for i, seen in enumerate(model.seen) if seen.refused] == [40]
    refused, retried = model.seen[40], model.seen[41]
    assert retried.tokens < refused.tokens and retried.messages[-1] == refused.messages[-1]
    assert kinds.count("model.recovery.started") == kinds.count("model.recovery.succeeded") == 1

    # What the view left as it was is the state's own objects; what it masked is new messages.
    last = model.seen[-1].messages
    ids = {id(m) for m in history}
    assert last[1] is history[0]  # the task (after LangChain's system message)
    assert all(id(m) in ids for m in last if isinstance(m, AIMessage))
    assert any(isinstance(m, ToolMessage) and id(m) not in ids for m in last)

    # Every reply's usage reached the baseline, between the compactions too.
    completed = [e for e in events if isinstance(e, ModelCompleted)]
    assert len(completed) == 63
    assert all(e.usage_status == "CONFIRMED_BASELINE" for e in completed)
    answered = [seen.tokens for seen in model.seen if not seen.refused]
    assert [e.input_tokens for e in completed] == answered
    assert session.usage.status == "CONFIRMED_BASELINE"

    # contextkeep's transcript is that history.
    assert texts(session.transcript) == texts(history)

    # A second process on the same store and thread builds the byte-identical view, then continues.
    tools = [convert_to_openai_tool(read_log)]
    here = json.dumps((await session.current_view(tools=tools)).messages, ensure_ascii=False)
    history_file = tmp_path / "history.json"
    history_file.write_text(json.dumps(messages_to_dict(history)))
    out = second_process(tmp_path, store, history_file)
    assert out["view"] == here
    assert out["first_request"] == here  # what its model saw first: that view, and the new question
    assert out["first_request_tokens"] <= limit and out["orphans"] == 0
    assert out["history"] == len(history) + 1 + 2 * 2 + 1
    assert out["transcript"] == out["history"] and out["conversation_id"] == "build-4411"


@pytest.mark.slow
def test_the_example_runs_offline() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO / "examples" / "langchain_agent.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr
    assert "the model saw" in run.stdout and "the agent's history" in run.stdout


def second_process(tmp_path: Path, store: str, history_file: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, __file__, str(tmp_path), store, str(history_file)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    return cast(dict[str, Any], json.loads(run.stdout.splitlines()[-1]))


async def _continue(tmp_path: Path, store: str, history_file: Path) -> dict[str, Any]:
    """The second process: a new manager on the store, the same thread, the framework's history."""
    cm = open_manager(tmp_path, store)
    session = cm.new_session("build-4411")
    await session.load()
    view = (await session.current_view(tools=[convert_to_openai_tool(read_log)])).messages
    history = messages_from_dict(json.loads(history_file.read_text()))
    model = ProviderModel(counter=cm.new_counter(), tool_calls=2)
    middleware = ContextKeepMiddleware(cm)
    agent = agent_for(model, middleware, checkpointer=False)
    state = await agent.ainvoke(
        {"messages": [*history, HumanMessage("Check two more parts.")]}, config("build-4411")
    )
    continued = await middleware.session("build-4411")
    await cm.close()
    first = to_openai(from_openai(convert_to_openai_messages(model.seen[0].messages[1:-1])))
    return {
        "view": json.dumps(view, ensure_ascii=False),
        "first_request": json.dumps(first, ensure_ascii=False),
        "first_request_tokens": model.seen[0].tokens,
        "orphans": sum(orphans(seen.messages) for seen in model.seen),
        "history": len(state["messages"]),
        "transcript": len(continued.transcript),
        "conversation_id": continued.conversation_id,
    }


if __name__ == "__main__":
    folder, url, saved = sys.argv[1:4]
    print(json.dumps(asyncio.run(_continue(Path(folder), url, Path(saved)))))
