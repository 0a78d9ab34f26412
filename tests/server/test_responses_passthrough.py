"""`POST /v1/responses` to an upstream that speaks Responses, through the real `openai` SDK.

The view goes upstream as Responses input items: reasoning items exactly as the upstream sent
them, `previous_response_id` continued here when this server answered it, else passed on.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from contextkeep._config import ContextConfig
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support import closing
from support.proxy_fixtures import (
    RESPONSES_READ_LOG,
    bodies_sent,
    continue_by_previous_id,
    counting_agent,
    openai_client,
    responses_create,
    served_proxy,
    worker_log,
)

WINDOW = 16_384
CALLS = 100
TOOLS: Any = [RESPONSES_READ_LOG]
MANAGED: Any = {"window": WINDOW, "config": ContextConfig(min_keep_tokens=0)}


@pytest.fixture
def served(start_proxy):
    agent = counting_agent(reasoning=lambda step: f"worker-{step} is next")
    upstream = FakeLLMServer(context_window=WINDOW, responder=agent, responses_api=True)
    return start_proxy(upstream, **MANAGED), upstream


def responses_calls(upstream: FakeLLMServer) -> list[Any]:
    return bodies_sent(upstream, "/v1/responses")


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_hundred_call_loop_reaches_a_responses_upstream_as_responses_reasoning_kept_exactly(served, stream):
    server, upstream = served
    client = openai_client(server, "codex-responses")
    items: list[Any] = [{"role": "user", "content": "Find the slowest worker, one log at a time."}]
    request: Any = {"model": "fake-model", "instructions": "You are an operations agent.", "tools": TOOLS}
    emitted: dict[str, Any] = {}
    for step in range(CALLS):
        response = responses_create(
            client, stream, **request, input=items, max_output_tokens=1024, store=False
        )
        assert response.output_text == f"step {step}"
        [call] = [item for item in response.output if item.type == "function_call"]
        emitted.update((i.id, i.to_dict()) for i in response.output if i.type == "reasoning")
        items += [item.to_dict() for item in response.output]
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": worker_log(step)})
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
    client = openai_client(server)
    first, _, second = continue_by_previous_id(client, stream, TOOLS)
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
    second = openai_client(server).responses.create(
        model="fake-model", input="And the next one.", previous_response_id=earlier.id
    )
    assert second.previous_response_id == earlier.id
    sent = responses_calls(upstream)[-1]
    assert sent["previous_response_id"] == earlier.id and sent["input"] == "And the next one."


def test_a_chat_setting_sends_responses_to_chat_completions_even_to_a_responses_upstream(tmp_path):
    upstream = FakeLLMServer(context_window=WINDOW, responses_api=True)
    with upstream, served_proxy(tmp_path, upstream, **MANAGED, upstream_api="chat") as server:
        response = openai_client(server).responses.create(model="fake-model", input="Hi.")
    assert response.output_text == "ok"
    assert [r.path for r in upstream.requests if r.path != "/v1/models"] == ["/v1/chat/completions"]


def test_function_call_arguments_reach_the_client_delta_by_delta(served):
    server, _ = served
    events: list[Any] = list(
        openai_client(server).responses.create(model="fake-model", input="Go.", tools=TOOLS, stream=True)
    )
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) > 1 and "".join(deltas) == '{"name": "worker-0.log"}'


def test_an_overflow_the_responses_upstream_reports_is_compacted_and_retried(tmp_path):
    def agent(body: Any) -> Reply:
        return Reply(text="next", tool_calls=[ToolCallSpec("read_log", {"name": "w.log"})])

    upstream = FakeLLMServer(context_window=4096, responder=agent, responses_api=True)
    # The proxy is told the window is 4x what the upstream serves: only the upstream's refusal tells.
    with upstream, served_proxy(tmp_path, upstream, **MANAGED) as server:
        client = openai_client(server, "told-too-much")
        items: list[Any] = [{"role": "user", "content": "Read every log."}]
        for step in range(12):
            response = client.responses.create(model="fake-model", input=items, tools=TOOLS)
            [call] = [item for item in response.output if item.type == "function_call"]
            items += [item.to_dict() for item in response.output]
            items.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": worker_log(step)}
            )
    calls = responses_calls(upstream)
    assert len(calls) > 12  # refused for overflow at least once, then sent again compacted
    assert len(calls[-1]["input"]) < len(items) - 2
