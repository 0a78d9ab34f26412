"""`POST /v1/messages` through the real `anthropic` SDK when the upstream speaks only chat completions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from contextkeep._config import ContextConfig
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer
from support.proxy_fixtures import (
    ANTHROPIC_READ_LOG,
    answer_tool_use,
    anthropic_client,
    counting_agent,
    messages_create,
    served_proxy,
)
from support.stub_http import QuietHandler, stub_server

WINDOW = 16_384
CALLS = 100
TOOLS: Any = [ANTHROPIC_READ_LOG]


def client_of(server: BackgroundServer, conversation: str) -> anthropic.Anthropic:
    return anthropic_client(server, conversation, api_key="sk-ant-client")


@pytest.fixture
def served(start_proxy):
    agent = counting_agent(reasoning=lambda step: f"look at worker-{step}")
    upstream = FakeLLMServer(context_window=WINDOW, responder=agent, messages_api=False)
    config = ContextConfig(min_keep_tokens=0)
    return start_proxy(upstream, window=WINDOW, config=config, upstream_api_key="sk-configured"), upstream


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_hundred_call_tool_loop_through_a_chat_only_16k_upstream(served, stream):
    server, upstream = served
    client = client_of(server, "claude-on-chat")
    history: list[Any] = [{"role": "user", "content": "Find the slowest worker, one log at a time."}]
    for step in range(CALLS):
        request: Any = {
            "model": "fake-model",
            "max_tokens": 1024,
            "system": "You are an operations agent.",
            "messages": history,
            "tools": TOOLS,
            "tool_choice": {"type": "auto"},
        }
        message = messages_create(client, stream, **request)
        assert message.stop_reason == "tool_use"
        [text] = [b for b in message.content if b.type == "text"]
        use = answer_tool_use(history, message, step)
        assert text.text == f"step {step}"
        assert use.name == "read_log" and use.input == {"name": f"worker-{step}.log"}
    chats = [r for r in upstream.requests if r.path == "/v1/chat/completions"]
    assert len(chats) == CALLS  # one upstream call per client call: nothing refused and retried
    last = chats[-1].body
    assert last["tools"][0]["function"]["name"] == "read_log" and last["tool_choice"] == "auto"
    assert last["messages"][0] == {"role": "system", "content": "You are an operations agent."}
    # The configured key, as a chat upstream takes it, never the client's own.
    assert {r.headers.get("authorization") for r in chats} == {"Bearer sk-configured"}
    # A tool call and its result reach the upstream as a chat pair.
    calls = [m for m in last["messages"] if m.get("tool_calls")]
    results = {m["tool_call_id"] for m in last["messages"] if m["role"] == "tool"}
    assert calls and {c["tool_calls"][0]["id"] for c in calls} <= results
    status = httpx.get(f"{server.url}/api/conversations/claude-on-chat/status").json()
    assert status["messages"] == 2 * CALLS + 1  # system, task, then every round: one transcript
    assert status["compactions"] > 0  # the history is far over the window: it fit by compaction


def test_a_chat_upstreams_refusal_comes_in_the_messages_shape(served):
    server, upstream = served
    client = client_of(server, "refused")
    upstream.fail_next(429, {"error": {"message": "slow down", "type": "rate_limit", "code": None}})
    with pytest.raises(anthropic.RateLimitError, match="slow down") as raised:
        client.messages.create(
            model="fake-model", max_tokens=64, messages=[{"role": "user", "content": "Hi."}]
        )
    assert raised.value.body["type"] == "error"  # type: ignore[index]


class _BrokenStream(QuietHandler):
    """A chat-only upstream whose streamed reply stops mid-body: one event, then the connection closes."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        chunk = b'data: {"choices": [{"index": 0, "delta": {"content": "The slow"}}]}\n\n'
        self.wfile.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
        self.wfile.write(b"transfer-encoding: chunked\r\n\r\n")
        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))  # no last chunk: the body never ends
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def broken_upstream() -> Iterator[str]:
    with stub_server(_BrokenStream) as url:
        yield f"{url}/v1"


def test_a_stream_that_breaks_after_it_started_ends_in_an_anthropic_error_event(tmp_path, broken_upstream):
    with served_proxy(tmp_path, broken_upstream, window=WINDOW) as server:
        client = client_of(server, "broken")
        request: Any = {
            "model": "fake-model",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "Go."}],
        }
        seen: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as raised, client.messages.stream(**request) as events:
            seen.extend(events.text_stream)
        assert seen == ["The slow"]  # what had come through reached the client before the error
        body: Any = raised.value.body
        assert body["type"] == "error" and body["error"]["type"] == "api_error"
        assert "upstream stream broke" in body["error"]["message"]
        status = httpx.get(f"{server.url}/api/conversations/broken/status").json()
        assert status["messages"] == 1  # the partial reply was not recorded
