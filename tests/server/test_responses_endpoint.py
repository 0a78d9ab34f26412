"""`POST /v1/responses` through the real `openai` SDK against a chat-only upstream: a long tool loop in 16k."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from contextkeep._config import ContextConfig
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support.proxy_fixtures import (
    RESPONSES_READ_LOG,
    continue_by_previous_id,
    openai_client,
    responses_create,
    worker_log,
)

WINDOW = 16_384
CALLS = 100
TOOLS: Any = [RESPONSES_READ_LOG]


def agent(body: Any) -> Reply:
    step = body["messages"][-1]["content"].count("\n") if body["messages"][-1]["role"] == "tool" else 0
    return Reply(text=f"step {step}", tool_calls=[ToolCallSpec("read_log", {"name": f"worker-{step}.log"})])


@pytest.fixture
def served(start_proxy):
    upstream = FakeLLMServer(context_window=WINDOW, responder=agent)
    return start_proxy(upstream, window=WINDOW, config=ContextConfig(min_keep_tokens=0)), upstream


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_hundred_call_tool_loop_fits_a_16k_chat_upstream(served, stream):
    server, upstream = served
    client = openai_client(server, "codex-1")
    items: list[Any] = [{"role": "user", "content": "Find the slowest worker, one log at a time."}]
    request: Any = {"model": "fake-model", "instructions": "You are an operations agent.", "tools": TOOLS}
    for step in range(CALLS):
        response = responses_create(client, stream, **request, input=items, max_output_tokens=1024)
        assert response.output_text.startswith("step ")
        [call] = [item for item in response.output if item.type == "function_call"]
        items += [item.model_dump(exclude_none=True) for item in response.output]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": worker_log(step)})
    calls = [r for r in upstream.requests if r.path == "/v1/chat/completions"]
    assert len(calls) == CALLS  # one upstream call per client call: no overflow refused and retried
    status = httpx.get(f"{server.url}/api/conversations/codex-1/status").json()
    assert status["messages"] == 2 * CALLS + 1  # instructions, task, then every round: one transcript
    assert status["compactions"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_previous_response_id_continues_locally(served, stream):
    server, upstream = served
    client = openai_client(server)
    first, call_id, second = continue_by_previous_id(client, stream, TOOLS)
    assert second.previous_response_id == first.id
    sent = upstream.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == call_id and sent[2]["content"] == "done"
    with pytest.raises(openai.BadRequestError, match="not found"):
        client.responses.create(model="fake-model", input="x", previous_response_id="resp_unknown")
