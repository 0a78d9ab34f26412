"""`ContextKeepMiddleware` under `astream` and `stream`: every streamed call goes through the view."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessageChunk,
    HumanMessage,
)

from contextkeep.integrations.langchain import ContextKeepMiddleware
from support.langchain_harness import (
    MAX_TOKENS,
    TASK,
    WINDOW,
    ProviderModel,
    agent_for,
    config,
    open_manager,
    orphans,
    texts,
)


@pytest.mark.parametrize("blocking", [False, True], ids=["astream", "stream"])
async def test_streaming_runs_stream_every_call_through_the_view(
    tmp_path: Path, opened: list[Any], blocking: bool
) -> None:
    cm = open_manager(tmp_path)
    model = ProviderModel(counter=cm.new_counter(), tool_calls=24)
    middleware = ContextKeepMiddleware(cm)
    opened += [cm, middleware]
    agent = agent_for(model, middleware)
    run = {"messages": [HumanMessage(TASK)]}
    if blocking:  # agent.stream: the engine on its worker loop, each model call in this thread
        chunks = await asyncio.to_thread(lambda: list(agent.stream(run, config("t"), stream_mode="messages")))
    else:
        chunks = [c async for c in agent.astream(run, config("t"), stream_mode="messages")]
    streamed = [m for m, _ in chunks if isinstance(m, AIMessageChunk)]
    assert len(streamed) > 4 * 25  # words, tool-call pieces and the usage chunk of every reply
    assert sum(1 for m in streamed if m.tool_call_chunks) == 24
    history = (await agent.aget_state(config("t"))).values["messages"]
    assert len(history) == 1 + 2 * 24 + 1
    assert all(seen.tokens <= WINDOW - MAX_TOKENS and orphans(seen.messages) == 0 for seen in model.seen)
    assert any(len(b.messages) < len(a.messages) for a, b in zip(model.seen, model.seen[1:], strict=False))
    session = await middleware.session("t")
    assert texts(session.transcript) == texts(history)
    assert session.usage.status == "CONFIRMED_BASELINE"
    assert session.usage.input_tokens == model.seen[-1].tokens  # the streamed usage_metadata
