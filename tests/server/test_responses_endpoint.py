"""`POST /v1/responses` through the real `openai` SDK against a chat-only upstream: a long tool loop in 16k."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from contextkeep._config import ContextConfig
from contextkeep.server import ServerSettings, create_app
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support import closing

WINDOW = 16_384
CALLS = 100
TOOLS: Any = [
    {
        "type": "function",
        "name": "read_log",
        "description": "Read one log file.",
        "parameters": {"type": "object", "properties": {"name": {"type": "string"}}},
    }
]


def agent(body: Any) -> Reply:
    step = body["messages"][-1]["content"].count("\n") if body["messages"][-1]["role"] == "tool" else 0
    return Reply(text=f"step {step}", tool_calls=[ToolCallSpec("read_log", {"name": f"worker-{step}.log"})])


def log_output(step: int) -> str:
    return "\n".join(
        f"worker-{step} line {i}: batch {step * 100 + i} took {i * 7 % 97} ms" for i in range(40)
    )


@pytest.fixture
def served(tmp_path):
    with FakeLLMServer(context_window=WINDOW, responder=agent) as upstream:
        settings = ServerSettings(
            store=f"sqlite:///{tmp_path / 'ck.db'}",
            workspace=str(tmp_path / "ws"),
            upstream=upstream.base_url,
            model="fake-model",
            window=WINDOW,
            config=ContextConfig(min_keep_tokens=0),
            tokenizer="tiktoken:o200k_base",  # the fake upstream counts with it
        )
        with BackgroundServer(create_app(settings)) as server:
            yield server, upstream


def create(client: openai.OpenAI, stream: bool, **request: Any) -> Any:
    if not stream:
        return client.responses.create(**request)
    events = list(client.responses.create(**request, stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    return events[-1].response


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_hundred_call_tool_loop_fits_a_16k_chat_upstream(served, stream):
    server, upstream = served
    client = closing(
        openai.OpenAI(
            base_url=f"{server.url}/v1",
            api_key="test",
            default_headers={"X-Conversation-Id": "codex-1"},
            max_retries=0,
        )
    )
    items: list[Any] = [{"role": "user", "content": "Find the slowest worker, one log at a time."}]
    request: Any = {"model": "fake-model", "instructions": "You are an operations agent.", "tools": TOOLS}
    for step in range(CALLS):
        response = create(client, stream, **request, input=items, max_output_tokens=1024)
        assert response.output_text.startswith("step ")
        [call] = [item for item in response.output if item.type == "function_call"]
        items += [item.model_dump(exclude_none=True) for item in response.output]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": log_output(step)})
    calls = [r for r in upstream.requests if r.path == "/v1/chat/completions"]
    assert len(calls) == CALLS  # one upstream call per client call: no overflow refused and retried
    status = httpx.get(f"{server.url}/api/conversations/codex-1/status").json()
    assert status["messages"] == 2 * CALLS + 1  # instructions, task, then every round: one transcript
    assert status["compactions"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_previous_response_id_continues_locally(served, stream):
    server, upstream = served
    client = closing(openai.OpenAI(base_url=f"{server.url}/v1", api_key="test", max_retries=0))
    first = create(client, stream, model="fake-model", input="Read the first log.", tools=TOOLS)
    [call] = [item for item in first.output if item.type == "function_call"]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "done"}
    second = create(
        client, stream, model="fake-model", input=[output], previous_response_id=first.id, tools=TOOLS
    )
    assert second.previous_response_id == first.id
    sent = upstream.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == call.call_id and sent[2]["content"] == "done"
    with pytest.raises(openai.BadRequestError, match="not found"):
        client.responses.create(model="fake-model", input="x", previous_response_id="resp_unknown")
