"""`POST /v1/messages` through the real `anthropic` SDK when the upstream speaks only chat completions."""

from __future__ import annotations

import itertools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import httpx
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
        "name": "read_log",
        "description": "Read one log file.",
        "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}},
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


def client_of(server: BackgroundServer, conversation: str) -> anthropic.Anthropic:
    return closing(
        anthropic.Anthropic(
            base_url=server.url,
            api_key="sk-ant-client",
            default_headers={"X-Conversation-Id": conversation},
            max_retries=0,
        )
    )


@pytest.fixture
def served(tmp_path):
    steps = itertools.count()

    def agent(body: Any) -> Reply:
        step = next(steps)
        return Reply(
            text=f"step {step}",
            reasoning=f"look at worker-{step}",
            tool_calls=[ToolCallSpec("read_log", {"name": f"worker-{step}.log"})],
        )

    with FakeLLMServer(context_window=WINDOW, responder=agent, messages_api=False) as upstream:
        settings = settings_for(tmp_path, upstream, upstream_api_key="sk-configured")
        with BackgroundServer(create_app(settings)) as server:
            yield server, upstream


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
        if stream:
            with client.messages.stream(**request) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**request)
        assert message.stop_reason == "tool_use"
        [text] = [b for b in message.content if b.type == "text"]
        [use] = [b for b in message.content if b.type == "tool_use"]
        assert text.text == f"step {step}"
        assert use.name == "read_log" and use.input == {"name": f"worker-{step}.log"}
        history.append({"role": "assistant", "content": [b.model_dump() for b in message.content]})
        result = {"type": "tool_result", "tool_use_id": use.id, "content": log_output(step)}
        history.append({"role": "user", "content": [result]})
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


class _BrokenStream(BaseHTTPRequestHandler):
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

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


@pytest.fixture
def broken_upstream():
    http = ThreadingHTTPServer(("127.0.0.1", 0), _BrokenStream)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{http.server_address[1]}/v1"
    http.shutdown()
    http.server_close()
    thread.join()


def test_a_stream_that_breaks_after_it_started_ends_in_an_anthropic_error_event(tmp_path, broken_upstream):
    settings = ServerSettings(
        store=f"sqlite:///{tmp_path / 'ck.db'}",
        workspace=str(tmp_path / "ws"),
        upstream=broken_upstream,
        model="fake-model",
        window=WINDOW,
    )
    with BackgroundServer(create_app(settings)) as server:
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
