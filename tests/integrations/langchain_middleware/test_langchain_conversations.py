"""Which conversation `ContextKeepMiddleware` records: the thread or the one given, continued or forked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import (
    HumanMessage,
)

from contextkeep.integrations.langchain import ContextKeepMiddleware
from support.langchain_harness import TASK, ProviderModel, agent_for, config, open_manager, texts


async def test_the_conversation_is_the_thread_or_the_one_given(tmp_path: Path, opened: list[Any]) -> None:
    cm = open_manager(tmp_path)
    per_user = ContextKeepMiddleware(cm, conversation_id=lambda request: f"user-{request.runtime.context}")
    fixed = ContextKeepMiddleware(cm, conversation_id="ticket-1001")
    threads = ContextKeepMiddleware(cm)
    opened += [cm, per_user, fixed, threads]
    run = {"messages": [HumanMessage(TASK)]}
    for middleware in (per_user, fixed):
        agent = agent_for(
            ProviderModel(counter=cm.new_counter(), tool_calls=1), middleware, checkpointer=False
        )
        await agent.ainvoke(run, context=7)
    for conversation in ("user-7", "ticket-1001"):
        async with cm.session(conversation) as s:
            assert len(s.transcript) == 4
    agent = agent_for(ProviderModel(counter=cm.new_counter(), tool_calls=1), threads, checkpointer=False)
    with pytest.raises(ValueError, match="thread_id"):
        await agent.ainvoke(run)


async def test_a_thread_continued_by_another_run_appends_only_what_is_new(
    tmp_path: Path, opened: list[Any]
) -> None:
    cm = open_manager(tmp_path)
    middleware = ContextKeepMiddleware(cm)
    opened += [cm, middleware]
    model = ProviderModel(counter=cm.new_counter(), tool_calls=3)
    agent = agent_for(model, middleware)
    await agent.ainvoke({"messages": [HumanMessage(TASK)]}, config("t"))
    # The checkpointer hands the next run equal copies of the messages, not the same objects.
    state = await agent.ainvoke({"messages": [HumanMessage("And part 9?")]}, config("t"))
    session = await middleware.session("t")
    assert len(state["messages"]) == (1 + 2 * 3 + 1) + 2  # the second run: the question and the answer
    assert texts(session.transcript) == texts(state["messages"])
    assert session.conversation_id == "t"


async def test_a_history_that_does_not_continue_the_transcript_continues_in_a_fork(
    tmp_path: Path, opened: list[Any]
) -> None:
    cm = open_manager(tmp_path)
    middleware, its_own = ContextKeepMiddleware(cm), ContextKeepMiddleware(cm)
    opened += [cm, middleware, its_own]
    first = await agent_for(ProviderModel(counter=cm.new_counter(), tool_calls=2), middleware).ainvoke(
        {"messages": [HumanMessage(TASK)]}, config("shared")
    )
    # Another agent (a subagent, a rewritten state) runs on the same thread id with another history.
    other = ProviderModel(counter=cm.new_counter(), tool_calls=1)
    second = await agent_for(other, its_own).ainvoke(
        {"messages": [HumanMessage("Only check part 1.")]}, config("shared")
    )
    assert len(second["messages"]) == 4 and other.seen[0].messages[1].text == "Only check part 1."
    async with cm.session("shared") as s:
        assert texts(s.transcript) == texts(first["messages"])  # the first conversation is as it was
