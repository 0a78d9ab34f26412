"""The fake LLM server's replies, faults and recording, through the real openai and anthropic SDKs over HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import httpx
import openai
import pytest

from contextkeep._errors import ConfigError
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec, default_counter
from support import fake_server
from support.fake_server import USER, WINDOW, claude, oai, tokens

# The shared fixture; bound to a name here so pytest finds it in this module.
srv = fake_server.srv


# -- replies -------------------------------------------------------------------------------


def test_scripted_text_and_tool_calls_arrive_intact(srv: FakeLLMServer) -> None:
    call = ToolCallSpec("read_file", {"path": "src/app.py", "lines": [1, 20]})
    srv.enqueue(Reply(text="Let me look.", tool_calls=[call], reasoning="need the file"), "second")
    client = oai(srv)

    first = client.chat.completions.create(model="m", messages=USER)
    message = first.choices[0].message
    assert message.content == "Let me look."
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    (tool_call,) = message.tool_calls
    assert tool_call.type == "function"
    assert tool_call.id == "call_0001"
    assert tool_call.function.name == "read_file"
    assert json.loads(tool_call.function.arguments) == {"path": "src/app.py", "lines": [1, 20]}
    assert message.model_extra == {"reasoning_content": "need the file"}

    texts = [client.chat.completions.create(model="m", messages=USER) for _ in range(2)]
    assert [t.choices[0].message.content for t in texts] == ["second", "ok"]
    assert texts[1].choices[0].finish_reason == "stop"


def test_tool_call_ids_continue_and_restart_after_reset(srv: FakeLLMServer) -> None:
    spec = ToolCallSpec("ls")
    srv.enqueue(Reply(tool_calls=[spec, spec]), Reply(tool_calls=[spec]))
    client = oai(srv)
    ids = [
        [
            c.id
            for c in client.chat.completions.create(model="m", messages=USER).choices[0].message.tool_calls
            or []
        ]
        for _ in range(2)
    ]
    assert ids == [["call_0001", "call_0002"], ["call_0003"]]
    srv.reset()
    srv.enqueue(Reply(tool_calls=[spec]))
    again = client.chat.completions.create(model="m", messages=USER).choices[0].message
    assert again.content is None
    assert [c.id for c in again.tool_calls or []] == ["call_0001"]


def test_responder_answers_when_queue_is_empty() -> None:
    def echo(body: Any) -> Reply:
        return Reply(text=body["messages"][-1]["content"].upper())

    with FakeLLMServer(responder=echo) as server:
        reply = oai(server).chat.completions.create(model="m", messages=USER)
    assert reply.choices[0].message.content == "HI"


async def test_async_client_and_concurrent_requests_are_recorded(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply(tool_calls=[ToolCallSpec("grep", {"pattern": "TODO"})]))
    http = openai.DefaultAsyncHttpxClient(verify=False)
    client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0, http_client=http)
    first = await client.chat.completions.create(model="m", messages=USER)
    assert first.choices[0].message.tool_calls is not None
    tool_call = first.choices[0].message.tool_calls[0]
    assert tool_call.type == "function" and tool_call.function.arguments == '{"pattern": "TODO"}'

    messages: list[Any] = [[{"role": "user", "content": f"q{i}"}] for i in range(20)]
    replies = await asyncio.gather(*(client.chat.completions.create(model="m", messages=m) for m in messages))
    assert {r.choices[0].message.content for r in replies} == {"ok"}
    recorded = [r.body["messages"] for r in srv.requests[1:]]
    assert sorted(map(json.dumps, recorded)) == sorted(map(json.dumps, messages))
    await client.close()


def test_anthropic_sdk_text_thinking_tool_use_and_usage(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply("Checking.", [ToolCallSpec("ls", {"dir": "."})], reasoning="plan"))
    message = claude(srv).messages.create(model="claude-x", max_tokens=50, system="be brief", messages=USER)
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking", "text", "tool_use"]
    thinking, text, tool = message.content
    assert thinking.type == "thinking" and thinking.thinking == "plan"
    assert text.type == "text" and text.text == "Checking."
    assert tool.type == "tool_use" and (tool.id, tool.name, tool.input) == (
        "toolu_0001",
        "ls",
        {"dir": "."},
    )
    assert message.stop_reason == "tool_use"
    assert message.model == "claude-x"
    body = srv.requests[-1].body
    assert message.usage.input_tokens == default_counter(body)
    assert message.usage.output_tokens == tokens("Checking.") + tokens("plan") + tokens('{"dir": "."}')


def test_anthropic_streaming_reassembles(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply("one two three", [ToolCallSpec("ls", {"dir": "/"})]))
    with claude(srv).messages.stream(model="c", max_tokens=50, messages=USER) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[0].type == "text" and final.content[0].text == "one two three"
    assert final.content[1].type == "tool_use" and final.content[1].input == {"dir": "/"}
    assert final.usage.output_tokens == tokens("one two three") + tokens('{"dir": "/"}')


def test_max_tokens_cuts_the_reply(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply("alpha beta gamma delta epsilon", [ToolCallSpec("ls")]))
    reply = oai(srv).chat.completions.create(model="m", messages=USER, max_tokens=2)
    assert reply.choices[0].finish_reason == "length"
    assert reply.choices[0].message.content == "alpha beta"
    assert reply.choices[0].message.tool_calls is None
    assert reply.usage is not None and reply.usage.completion_tokens == 2


# -- faults, metadata, recording -----------------------------------------------------------


def test_fail_next_is_one_shot(srv: FakeLLMServer) -> None:
    body = {"error": {"message": "slow down", "type": "rate_limit_error", "code": "rate_limit"}}
    srv.fail_next(429, body, headers={"retry-after": "7"})
    srv.fail_next(503)
    client = oai(srv)
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="m", messages=USER)
    assert limited.value.body == body["error"]
    assert limited.value.response.headers["retry-after"] == "7"
    with pytest.raises(openai.InternalServerError) as unavailable:
        client.chat.completions.create(model="m", messages=USER)
    assert unavailable.value.status_code == 503
    assert client.chat.completions.create(model="m", messages=USER).choices[0].message.content == "ok"


def test_models_and_show_report_the_window() -> None:
    with FakeLLMServer(model="qwen3", context_window=32_768, architecture="qwen3") as server:
        (model,) = oai(server).models.list().data
        shown = httpx.post(f"{server.url}/api/show", json={"model": "qwen3"}).json()
    assert model.id == "qwen3"
    assert model.model_extra == {"root": "qwen3", "parent": None, "max_model_len": 32_768}
    assert shown["model_info"]["qwen3.context_length"] == 32_768
    assert shown["model_info"]["general.architecture"] == "qwen3"


def test_requests_are_recorded_exactly_and_reset(srv: FakeLLMServer) -> None:
    tools: Any = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    oai(srv).chat.completions.create(model="m", messages=USER, tools=tools, temperature=0)
    claude(srv).messages.create(model="c", max_tokens=5, messages=USER)
    (path, body, headers), second = srv.requests
    assert path == "/v1/chat/completions"
    assert body == {"model": "m", "messages": USER, "tools": tools, "temperature": 0}
    assert headers["authorization"] == "Bearer sk-test"
    assert second.path == "/v1/messages"
    assert "anthropic-version" in second.headers
    srv.reset()
    assert srv.requests == []


def test_unknown_route_and_bad_body(srv: FakeLLMServer) -> None:
    assert httpx.get(f"{srv.url}/nope").status_code == 404
    bad = httpx.post(f"{srv.base_url}/chat/completions", json={"model": "m"})
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"


def test_served_to_another_process(srv: FakeLLMServer) -> None:
    code = "import httpx, sys; print(httpx.get(sys.argv[1]).json()['data'][0]['max_model_len'])"
    out = subprocess.run(
        [sys.executable, "-c", code, f"{srv.base_url}/models"],
        capture_output=True,
        text=True,
        check=True,
        timeout=20,
    )
    assert out.stdout.strip() == str(WINDOW)


def test_settings_are_validated_and_url_needs_a_running_server() -> None:
    with pytest.raises(ConfigError) as caught:
        FakeLLMServer(usage_mode="sometimes")  # type: ignore[arg-type]  # what is checked: a bad value
    assert caught.value.key == "usage_mode"
    with pytest.raises(ConfigError):
        FakeLLMServer(overflow_format="azure")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        FakeLLMServer().fail_next_summaries("boom")  # type: ignore[arg-type]
    server = FakeLLMServer()
    with pytest.raises(RuntimeError):
        _ = server.base_url
    url = f"{server.start().base_url}/models"
    try:
        assert httpx.get(url).status_code == 200
    finally:
        server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url)
