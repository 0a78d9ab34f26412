"""Errors under `ContextKeepMiddleware`: an overflow compaction cannot fix, and others, reach the caller."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
from langchain_core.messages import (
    HumanMessage,
)
from langchain_core.outputs import ChatResult

from contextkeep._events import Event, RecoveryFailed
from contextkeep.integrations.langchain import ContextKeepMiddleware
from support.langchain_harness import TASK, ProviderModel, agent_for, config, open_manager


async def test_an_overflow_compaction_cannot_fix_reaches_the_caller_as_the_providers_error(
    tmp_path: Path, opened: list[Any], events: list[Event]
) -> None:
    cm = open_manager(tmp_path, max_token_limit_recovery_attempts=0)
    cm.events.subscribe(events.append)
    model = ProviderModel(counter=cm.new_counter(), tool_calls=3, fail_once_at=2)
    middleware = ContextKeepMiddleware(cm)
    opened += [cm, middleware]
    with pytest.raises(openai.BadRequestError, match="maximum context length is 32768 tokens"):
        await agent_for(model, middleware).ainvoke({"messages": [HumanMessage(TASK)]}, config("t"))
    assert [e.reason for e in events if isinstance(e, RecoveryFailed)] == ["attempts_exhausted"]


async def test_other_errors_reach_the_caller_unchanged(tmp_path: Path, opened: list[Any]) -> None:
    class Down(ProviderModel):
        def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
            raise error

    error = openai.APIConnectionError(request=cast(Any, httpx.Request("POST", "https://api.deepseek.com")))
    cm = open_manager(tmp_path)
    middleware = ContextKeepMiddleware(cm)
    opened += [cm, middleware]
    agent = agent_for(Down(counter=cm.new_counter()), middleware)
    with pytest.raises(openai.APIConnectionError) as raised:
        await agent.ainvoke({"messages": [HumanMessage(TASK)]}, config("t"))
    assert raised.value is error
    with pytest.raises(openai.APIConnectionError) as raised:
        await asyncio.to_thread(agent.invoke, {"messages": [HumanMessage(TASK)]}, config("u"))
    assert raised.value is error
