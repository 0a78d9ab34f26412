"""`POST /v1/messages` through the real `anthropic` SDK: a long tool loop fits a 16k Anthropic upstream."""

from __future__ import annotations

import itertools
from typing import Any

import anthropic
import httpx
import pytest

from contextkeep._config import ContextConfig
from contextkeep.server import ServerSettings, create_app
from contextkeep.server._derived_id import derived_conversation_id
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support import closing

WINDOW = 16_384
CALLS = 100
TOOLS: Any = [
    {
        "name": "read_log",
        "description": "Read one log file.",
        "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}},
    }
]


def thinking(step: int) -> str:
    # Spacing, tabs and non-ASCII that any re-serialisation would disturb.
    return f"  Step {step}:\tcompare “worker-{step}” with the last one ✓ \n\n  next…  "


def log_output(step: int) -> str:
    return "\n".join(
        f"worker-{step} line {i}: batch {step * 100 + i} took {i * 7 % 97} ms" for i in range(40)
    )


@pytest.fixture
def served(tmp_path):
    steps = itertools.count()

    def agent(body: Any) -> Reply:
        step = next(steps)
        return Reply(
            text=f"step {step}",
            reasoning=thinking(step),
            tool_calls=[ToolCallSpec("read_log", {"name": f"worker-{step}.log"})],
        )

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


def run_loop(server: BackgroundServer, conversation: str, *, stream: bool) -> dict[str, tuple[str, str]]:
    """`CALLS` tool-loop calls; any client-visible error raises. The thinking seen, by tool_use id."""
    client = closing(
        anthropic.Anthropic(
            base_url=server.url,
            api_key="sk-ant-test",
            default_headers={"X-Conversation-Id": conversation},
            max_retries=0,
        )
    )
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
        if stream:
            with client.messages.stream(**request) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**request)
        assert message.stop_reason == "tool_use"
        [think] = [b for b in message.content if b.type == "thinking"]
        [use] = [b for b in message.content if b.type == "tool_use"]
        assert think.thinking == thinking(step)
        seen[use.id] = (think.thinking, think.signature)
        history.append({"role": "assistant", "content": [b.model_dump() for b in message.content]})
        result = {"type": "tool_result", "tool_use_id": use.id, "content": log_output(step)}
        history.append({"role": "user", "content": [result]})
    return seen


def assert_thinking_sent_back_exactly(upstream: FakeLLMServer, seen: dict[str, tuple[str, str]]) -> None:
    checked = 0
    calls = [r.body for r in upstream.requests if r.path == "/v1/messages" and r.body.get("messages")]
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
    client = closing(anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0))
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
