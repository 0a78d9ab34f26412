"""The proxy with the real `openai` SDK: a long tool-using agent fits a small upstream window."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from contextkeep._config import ContextConfig
from contextkeep.server._derived_id import derived_conversation_id
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec, default_counter
from support import SSECollector, types
from support.proxy_fixtures import openai_client

WINDOW = 2_000
TURNS = 40
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
OVERFLOW = {
    "error": {
        "message": f"This model's maximum context length is {WINDOW} tokens. However, your messages "
        "resulted in 2600 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def agent_reply(body):
    step = sum(1 for m in body["messages"] if m["role"] == "tool")
    return Reply(
        text=f"checking step {step}", tool_calls=[ToolCallSpec("bash", {"command": f"cat log.{step}"})]
    )


def tool_output(n: int) -> str:
    lines = [
        f"log.{n} line {i}: worker {i % 7} processed batch {n * 100 + i} in {i * 3} ms" for i in range(30)
    ]
    return "\n".join(lines)


@pytest.fixture
def proxy(start_proxy):
    upstream = FakeLLMServer(context_window=WINDOW, responder=agent_reply)
    config = ContextConfig(min_keep_tokens=0, reserved_tokens=200)
    return start_proxy(upstream, window=WINDOW, config=config), upstream


def client(server, conversation: str | None = "agent-1") -> openai.OpenAI:
    return openai_client(server, conversation)


@pytest.mark.slow
def test_long_agent_fits_the_window_and_recovers_from_overflow(proxy):
    server, upstream = proxy
    agent = client(server)
    history = [
        {"role": "system", "content": "You are an operations agent. Read logs with bash."},
        {"role": "user", "content": "Find out why the workers are slow."},
    ]
    with SSECollector(f"{server.url}/api/conversations/agent-1/events") as stream:
        for turn in range(TURNS):
            if turn == 25:
                upstream.fail_next(400, OVERFLOW)
            kwargs: dict[str, Any] = {"model": "fake-model", "messages": history, "tools": TOOLS}
            if turn % 3 == 0:
                message = streamed(agent, kwargs)
            else:
                message = (
                    agent.chat.completions.create(**kwargs).choices[0].message.model_dump(exclude_none=True)
                )
            assert message["tool_calls"], turn
            history.append(message)
            for call in message["tool_calls"]:
                history.append({"role": "tool", "tool_call_id": call["id"], "content": tool_output(turn)})
        events = stream.wait_for(lambda ev: "model.recovery.succeeded" in types(ev))
    full = default_counter({"messages": history, "tools": TOOLS})
    assert full > 4 * WINDOW  # without the proxy the agent would have overflowed long ago
    sent = [r.body for r in upstream.requests if r.path == "/v1/chat/completions"]
    assert len(sent) == TURNS + 1  # one retry after the forced overflow
    assert all(default_counter(b) <= WINDOW for b in sent)
    kinds = set(types(events))
    assert {
        "context.status",
        "model.completed",
        "context.compression.completed",
        "model.recovery.started",
    } <= kinds
    assert not any(d["synthesized"] for _, d in events)  # this process's own events, forwarded live
    calls = client_json(server, "/api/conversations/agent-1/calls")
    assert calls[-1]["messages"] and any(m["kind"] for m in calls[-1]["messages"])


def streamed(agent: openai.OpenAI, kwargs: dict[str, Any]) -> dict[str, Any]:
    chunks = list(agent.chat.completions.create(**kwargs, stream=True))
    assert all(c.choices for c in chunks)  # the usage chunk is not forwarded unless asked for
    calls: dict[int, dict[str, Any]] = {}
    text = ""
    for chunk in chunks:
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for c in delta.tool_calls or ():
            entry = calls.setdefault(
                c.index, {"id": c.id, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            entry["function"]["name"] += c.function.name or ""
            entry["function"]["arguments"] += c.function.arguments or ""
    return {"role": "assistant", "content": text or None, "tool_calls": list(calls.values())}


def client_json(server, path: str):
    import httpx

    return httpx.get(f"{server.url}{path}").json()


def test_stream_with_usage_pass_through_and_divergence(proxy):
    server, upstream = proxy
    history: Any = [{"role": "user", "content": "hello"}]
    chunks = list(
        client(server, "s-1").chat.completions.create(
            model="fake-model", messages=history, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
    status = client_json(server, "/api/conversations/s-1/status")
    assert status["usage"]["status"] == "CONFIRMED_BASELINE" and status["messages"] == 2
    # Without X-Conversation-Id the conversation is named after its head (`server._derived_id`).
    plain = client(server, None).chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "x"}]
    )
    assert plain.choices[0].message.tool_calls
    assert upstream.requests[-1].body["messages"] == [{"role": "user", "content": "x"}]
    derived = derived_conversation_id([{"role": "user", "content": "x"}])
    assert sorted(c["id"] for c in client_json(server, "/api/conversations")) == [derived, "s-1"]
    # A history that does not continue the stored one is a branch: served in a fork of its own.
    client(server, "s-1").chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "other"}]
    )
    assert upstream.requests[-1].body["messages"][-1] == {"role": "user", "content": "other"}
    # An upstream error that is not an overflow reaches the client as the upstream sent it.
    upstream.fail_next(
        401, {"error": {"message": "bad key", "type": "auth", "param": None, "code": "invalid_api_key"}}
    )
    with pytest.raises(openai.AuthenticationError, match="bad key"):
        client(server, "s-2").chat.completions.create(model="fake-model", messages=history)
    assert json.loads(json.dumps(status))  # the status is plain JSON
