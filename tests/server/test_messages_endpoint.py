"""`POST /v1/messages` through the real `anthropic` SDK: a long tool loop fits a 16k Anthropic upstream."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

from contextkeep._config import ContextConfig
from contextkeep.server._derived_id import derived_conversation_id
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer
from support.proxy_fixtures import (
    ANTHROPIC_READ_LOG,
    answer_tool_use,
    anthropic_client,
    bodies_sent,
    counting_agent,
    messages_create,
)

WINDOW = 16_384
CALLS = 100
TOOLS: Any = [ANTHROPIC_READ_LOG]


def thinking(step: int) -> str:
    # Spacing, tabs and non-ASCII that any re-serialisation would disturb.
    return f"  Step {step}:\tcompare “worker-{step}” with the last one ✓ \n\n  next…  "


@pytest.fixture
def served(start_proxy):
    upstream = FakeLLMServer(context_window=WINDOW, responder=counting_agent(reasoning=thinking))
    return start_proxy(upstream, window=WINDOW, config=ContextConfig(min_keep_tokens=0)), upstream


def run_loop(server: BackgroundServer, conversation: str, *, stream: bool) -> dict[str, tuple[str, str]]:
    """`CALLS` tool-loop calls; any client-visible error raises. The thinking seen, by tool_use id."""
    client = anthropic_client(server, conversation)
    history: list[Any] = [{"role": "user", "content": "Find the slowest worker, one log at a time."}]
    seen: dict[str, tuple[str, str]] = {}
    for step in range(CALLS):
        request: Any = {
            "model": "fake-model",
            "max_tokens": 1024,
            "system": "You are an operations agent.",
            "messages": history,
            "tools": TOOLS,
        }
        message = messages_create(client, stream, **request)
        assert message.stop_reason == "tool_use"
        [think] = [b for b in message.content if b.type == "thinking"]
        use = answer_tool_use(history, message, step)
        assert think.thinking == thinking(step)
        seen[use.id] = (think.thinking, think.signature)
    return seen


def assert_thinking_sent_back_exactly(upstream: FakeLLMServer, seen: dict[str, tuple[str, str]]) -> None:
    checked = 0
    calls = bodies_sent(upstream, "/v1/messages")
    assert len(calls) == CALLS  # one upstream call per client call: no overflow refused and retried
    for body in calls[1:]:
        last = [m for m in body["messages"] if m["role"] == "assistant"][-1]
        assert last["content"][0]["type"] == "thinking"  # the latest round is always whole
        for m in body["messages"]:
            if m["role"] != "assistant" or not isinstance(m["content"], list):
                continue
            blocks = {b["type"]: b for b in m["content"]}
            if "thinking" in blocks and "tool_use" in blocks:
                think = blocks["thinking"]
                assert (think["thinking"], think["signature"]) == seen[blocks["tool_use"]["id"]]
                checked += 1
    assert checked >= CALLS - 1


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_hundred_call_tool_loop_fits_a_16k_anthropic_upstream(served, stream):
    server, upstream = served
    seen = run_loop(server, "claude-1", stream=stream)
    assert_thinking_sent_back_exactly(upstream, seen)
    status = httpx.get(f"{server.url}/api/conversations/claude-1/status").json()
    assert status["messages"] == 2 * CALLS + 1  # system, task, then every round: one transcript
    assert status["compactions"] > 0  # the history is far over the window: it fit by compaction


@pytest.mark.slow
def test_retries_errors_and_a_missing_id(served):
    server, upstream = served
    client = anthropic_client(server)
    request: Any = {
        "model": "fake-model",
        "max_tokens": 256,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": "Hello."}],
    }
    # No X-Conversation-Id: managed under the id derived from the system prompt and first message.
    keyed = {"Idempotency-Key": "call-1"}
    first = client.messages.create(**request, extra_headers=keyed)
    calls = len(upstream.requests)
    again = client.messages.create(**request, extra_headers=keyed)
    assert again.id == first.id and len(upstream.requests) == calls  # the stored reply, no second call
    derived = derived_conversation_id(request["messages"], request["system"])
    assert httpx.get(f"{server.url}/api/conversations/{derived}/status").json()["messages"] == 3
    # The upstream's refusal as it sent it; the proxy's own in the Messages API's shape.
    upstream.fail_next(
        401, {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}
    )
    with pytest.raises(anthropic.AuthenticationError, match="bad key"):
        client.messages.create(**{**request, "messages": [{"role": "user", "content": "Other."}]})
    refused = httpx.post(f"{server.url}/v1/messages", json={"model": "m", "messages": request["messages"]})
    assert refused.status_code == 400
    assert refused.json()["type"] == "error" and refused.json()["error"]["type"] == "invalid_request_error"
