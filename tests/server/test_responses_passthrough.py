"""`POST /v1/responses` to an upstream that speaks Responses, through the real `openai` SDK.

The view goes upstream as Responses input items: reasoning items exactly as the upstream sent
them, `previous_response_id` continued here when this server answered it, else passed on.
"""

from __future__ import annotations

import itertools
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


def log_output(step: int) -> str:
    return "\n".join(
        f"worker-{step} line {i}: batch {step * 100 + i} took {i * 7 % 97} ms" for i in range(40)
    )


def settings_for(tmp_path: Any, upstream: FakeLLMServer, **overrides: Any) -> ServerSettings:
    fields: dict[str, Any] = {
        "store": f"sqlite:///{tmp_path / 'ck.db'}",
        "workspace": str(tmp_path / "ws"),
        "upstream": upstream.base_url,
        "model": "fake-model",
        "window": WINDOW,
        "config": ContextConfig(min_keep_tokens=0),
        "tokenizer": "tiktoken:o200k_base",  # the fake upstream counts with it
    }
    return ServerSettings(**{**fields, **overrides})


@pytest.fixture
def served(tmp_path):
    steps = itertools.count()

    def agent(body: Any) -> Reply:
        step = next(steps)
        return Reply(
            text=f"step {step}",
            reasoning=f"worker-{step} is next",
            tool_calls=[ToolCallSpec("read_log", {"name": f"worker-{step}.log"})],
        )

    upstream = FakeLLMServer(context_window=WINDOW, responder=agent, responses_api=True)
    with upstream, BackgroundServer(create_app(settings_for(tmp_path, upstream))) as server:
        yield server, upstream


def client_of(server: BackgroundServer, **headers: str) -> openai.OpenAI:
    return closing(
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="test", default_headers=headers, max_retries=0)
    )


def create(client: openai.OpenAI, stream: bool, **request: Any) -> Any:
    if not stream:
        return client.responses.create(**request)
    events = list(client.responses.create(**request, stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    return events[-1].response


def responses_calls(upstream: FakeLLMServer) -> list[Any]:
    return [r.body for r in upstream.requests if r.path == "/v1/responses" and r.body.get("input")]


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_hundred_call_loop_reaches_a_responses_upstream_as_responses_reasoning_kept_exactly(served, stream):
    server, upstream = served
    client = client_of(server, **{"X-Conversation-Id": "codex-responses"})
    items: list[Any] = [{"role": "user", "content": "Find the slowest worker, one log at a time."}]
    request: Any = {"model": "fake-model", "instructions": "You are an operations agent.", "tools": TOOLS}
    emitted: dict[str, Any] = {}
    for step in range(CALLS):
        response = create(client, stream, **request, input=items, max_output_tokens=1024, store=False)
        assert response.output_text == f"step {step}"
        [call] = [item for item in response.output if item.type == "function_call"]
        emitted.update((i.id, i.to_dict()) for i in response.output if i.type == "reasoning")
        items += [item.to_dict() for item in response.output]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": log_output(step)})
    bodies = responses_calls(upstream)
    assert len(bodies) == CALLS  # one upstream call per client call: nothing refused and retried
    assert not any(r.path == "/v1/chat/completions" for r in upstream.requests)
    last = bodies[-1]
    assert last["instructions"] == "You are an operations agent." and last["tools"] == TOOLS
    assert last["store"] is False and last["max_output_tokens"] == 1024  # the client's fields, as sent
    sent_reasoning = [i for body in bodies for i in body["input"] if i.get("type") == "reasoning"]
    assert sent_reasoning and all(item == emitted[item["id"]] for item in sent_reasoning)
    assert all(len(body["input"]) < len(items) for body in bodies[-10:])  # compacted views
    status = httpx.get(f"{server.url}/api/conversations/codex-responses/status").json()
    assert status["messages"] == 2 * CALLS + 1  # instructions, task, then every round: one transcript
    assert status["compactions"] > 0


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_previous_response_id_is_continued_here_when_this_server_answered_it(served, stream):
    server, upstream = served
    client = client_of(server)
    first = create(client, stream, model="fake-model", input="Read the first log.", tools=TOOLS)
    [call] = [item for item in first.output if item.type == "function_call"]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "done"}
    second = create(
        client, stream, model="fake-model", input=[output], previous_response_id=first.id, tools=TOOLS
    )
    assert second.output_text == "step 1"
    sent = responses_calls(upstream)[-1]
    assert "previous_response_id" not in sent  # the whole (managed) history went instead
    assert [i.get("type", "message") for i in sent["input"]] == [
        "message",
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert sent["input"][1:4] == [item.to_dict() for item in first.output]


def test_previous_response_id_this_server_never_saw_goes_to_the_upstream_that_holds_it(served):
    server, upstream = served
    direct = closing(openai.OpenAI(base_url=upstream.base_url, api_key="test", max_retries=0))
    earlier = direct.responses.create(model="fake-model", input="Read the first log.", tools=TOOLS)
    second = client_of(server).responses.create(
        model="fake-model", input="And the next one.", previous_response_id=earlier.id
    )
    assert second.previous_response_id == earlier.id
    sent = responses_calls(upstream)[-1]
    assert sent["previous_response_id"] == earlier.id and sent["input"] == "And the next one."


def test_a_chat_setting_sends_responses_to_chat_completions_even_to_a_responses_upstream(tmp_path):
    with FakeLLMServer(context_window=WINDOW, responses_api=True) as upstream:
        settings = settings_for(tmp_path, upstream, upstream_api="chat")
        with BackgroundServer(create_app(settings)) as server:
            response = client_of(server).responses.create(model="fake-model", input="Hi.")
    assert response.output_text == "ok"
    assert [r.path for r in upstream.requests if r.path != "/v1/models"] == ["/v1/chat/completions"]


def test_function_call_arguments_reach_the_client_delta_by_delta(served):
    server, _ = served
    events: list[Any] = list(
        client_of(server).responses.create(model="fake-model", input="Go.", tools=TOOLS, stream=True)
    )
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) > 1 and "".join(deltas) == '{"name": "worker-0.log"}'


def test_an_overflow_the_responses_upstream_reports_is_compacted_and_retried(tmp_path):
    def agent(body: Any) -> Reply:
        return Reply(text="next", tool_calls=[ToolCallSpec("read_log", {"name": "w.log"})])

    upstream = FakeLLMServer(context_window=4096, responder=agent, responses_api=True)
    # The proxy is told the window is 4x what the upstream serves: only the upstream's refusal tells.
    with upstream, BackgroundServer(create_app(settings_for(tmp_path, upstream, window=WINDOW))) as server:
        client = client_of(server, **{"X-Conversation-Id": "told-too-much"})
        items: list[Any] = [{"role": "user", "content": "Read every log."}]
        for step in range(12):
            response = client.responses.create(model="fake-model", input=items, tools=TOOLS)
            [call] = [item for item in response.output if item.type == "function_call"]
            items += [item.to_dict() for item in response.output]
            items.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": log_output(step)}
            )
    calls = responses_calls(upstream)
    assert len(calls) > 12  # refused for overflow at least once, then sent again compacted
    assert len(calls[-1]["input"]) < len(items) - 2
