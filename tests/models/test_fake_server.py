"""The fake LLM server, exercised through the real openai and anthropic SDKs over HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import tiktoken

from contextkeep._errors import ConfigError
from contextkeep.testing import (
    DEFAULT_SUMMARY_MARKER,
    SUMMARY_FIELDS,
    FakeLLMServer,
    Reply,
    ToolCallSpec,
    UsageMode,
    default_counter,
)
from support import closing, use_offline_tokenizers

# tiktoken reads this when the encoding is first loaded, so setting it here is early enough.
use_offline_tokenizers()

# Messages and tools stay plain dicts (`Any`): these tests are about the wire format, not the SDKs' TypedDicts.
USER: Any = [{"role": "user", "content": "hi"}]
WINDOW = 100


def tokens(text: str) -> int:
    return len(tiktoken.get_encoding("o200k_base").encode(text))


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(context_window=WINDOW) as server:
        yield server


# The server is plain HTTP: skipping certificate loading saves ~40 ms per client.
def oai(server: FakeLLMServer, **kwargs: Any) -> openai.OpenAI:
    http = openai.DefaultHttpxClient(verify=False)
    return closing(
        openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0, http_client=http, **kwargs)
    )


def claude(server: FakeLLMServer) -> anthropic.Anthropic:
    http = anthropic.DefaultHttpxClient(verify=False)
    return closing(
        anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="k", max_retries=0, http_client=http)
    )


def fixed(n: int) -> Any:
    """A counter that says every prompt has `n` tokens."""
    return lambda body: n


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


# -- usage ---------------------------------------------------------------------------------


def test_usage_counts_prompt_with_tiktoken_and_completion_from_reply(srv: FakeLLMServer) -> None:
    srv.enqueue("four score and seven")
    reply = oai(srv).chat.completions.create(model="m", messages=USER)
    # user "hi": role + content lines, 3 framing per message, 3 for priming the reply.
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == tokens("user\nhi") + 3 + 3
    assert reply.usage.completion_tokens == tokens("four score and seven")
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_custom_counter_drives_usage() -> None:
    with FakeLLMServer(counter=fixed(77)) as server:
        reply = oai(server).chat.completions.create(model="m", messages=USER)
    assert reply.usage is not None and reply.usage.prompt_tokens == 77


def test_usage_mode_switches_between_calls(srv: FakeLLMServer) -> None:
    srv.counter = fixed(40)
    client = oai(srv)
    expected: dict[UsageMode, dict[str, int]] = {
        "full": {"prompt_tokens": 40, "completion_tokens": 1, "total_tokens": 41},
        "prompt_only": {"prompt_tokens": 40},
        "completion_only": {"completion_tokens": 1},
    }
    for mode, usage in expected.items():
        srv.usage_mode = mode
        raw = client.chat.completions.with_raw_response.create(model="m", messages=USER)
        assert raw.http_response.json()["usage"] == usage
    srv.usage_mode = "omit"
    raw = client.chat.completions.with_raw_response.create(model="m", messages=USER)
    assert "usage" not in raw.http_response.json()
    assert raw.parse().usage is None


@pytest.mark.parametrize(
    ("mode", "usage"),
    [
        ("full", {"input_tokens": 40, "output_tokens": 1}),
        ("prompt_only", {"input_tokens": 40}),
        ("completion_only", {"output_tokens": 1}),
        ("omit", None),
    ],
)
def test_anthropic_usage_modes(mode: Any, usage: Any) -> None:
    with FakeLLMServer(counter=fixed(40), usage_mode=mode) as server:
        raw = claude(server).messages.with_raw_response.create(model="c", max_tokens=10, messages=USER)
    assert raw.http_response.json().get("usage") == usage


def test_stream_include_usage_sends_usage_last(srv: FakeLLMServer) -> None:
    srv.counter = fixed(30)
    srv.enqueue(Reply("streamed words here", [ToolCallSpec("ls", {"a": 1})]))
    stream = oai(srv).chat.completions.create(
        model="m", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    completion = tokens("streamed words here") + tokens('{"a": 1}')
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (30, completion)
    assert all(c.usage is None for c in chunks[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    assert text == "streamed words here"
    assert len(chunks) > 5  # really chunked: role, three words, two tool deltas, finish, usage
    args = "".join(
        tc.function.arguments or ""
        for c in chunks[:-1]
        for tc in c.choices[0].delta.tool_calls or []
        if tc.function
    )
    assert json.loads(args) == {"a": 1}
    assert chunks[-2].choices[0].finish_reason == "tool_calls"


def test_stream_without_include_usage_has_no_usage(srv: FakeLLMServer) -> None:
    chunks = list(oai(srv).chat.completions.create(model="m", messages=USER, stream=True))
    assert all(c.usage is None and c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "ok"


# -- context window ------------------------------------------------------------------------

MSG = "This model's maximum context length is 100 tokens. However, "
REQUESTED = (
    "you requested 150 tokens (150 in the messages, 0 in the completion). "
    "Please reduce the length of the messages or completion."
)
INPUT_OVERFLOW: dict[str, dict[str, Any]] = {
    "openai": {
        "error": {
            "message": MSG + "your messages resulted in 150 tokens. "
            "Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    },
    "deepseek": {
        "error": {
            "message": MSG + REQUESTED,
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    },
    "vllm": {
        "object": "error",
        "message": MSG + REQUESTED,
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "anthropic": {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 150 tokens > 100 maximum"},
    },
    "llamacpp": {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 150,
            "n_ctx": 100,
        }
    },
    "dashscope": {
        "code": "InvalidParameter",
        "message": "Range of input length should be [1, 100]",
        "request_id": "fake-request-0001",
    },
}


@pytest.mark.parametrize("fmt", sorted(INPUT_OVERFLOW))
def test_prompt_over_window_answers_in_provider_format(fmt: Any) -> None:
    server = FakeLLMServer(context_window=WINDOW, counter=fixed(150), overflow_format=fmt)
    with server, pytest.raises(openai.BadRequestError) as caught:
        oai(server).chat.completions.create(model="m", messages=USER)
    error = caught.value
    expected = INPUT_OVERFLOW[fmt]
    assert error.status_code == 400
    assert error.response.json() == expected
    # The SDK unwraps a top-level "error" object into `body`.
    assert error.body == expected.get("error", expected)


TOTAL_OVERFLOW = {
    "openai": MSG + "you requested 110 tokens (60 in the messages, 50 in the completion). "
    "Please reduce the length of the messages or completion.",
    "deepseek": MSG + "you requested 110 tokens (60 in the messages, 50 in the completion). "
    "Please reduce the length of the messages or completion.",
    "vllm": MSG + "you requested 110 tokens (60 in the messages, 50 in the completion). "
    "Please reduce the length of the messages or completion.",
    "anthropic": "input length and `max_tokens` exceed context limit: 60 + 50 > 100, "
    "decrease input length or `max_tokens` and try again",
    "dashscope": "Range of input length should be [1, 50]",
}


@pytest.mark.parametrize("fmt", sorted(TOTAL_OVERFLOW))
def test_prompt_plus_max_tokens_over_window_is_total_overflow(fmt: Any) -> None:
    with FakeLLMServer(context_window=WINDOW, counter=fixed(60), overflow_format=fmt) as server:
        client = oai(server)
        assert client.chat.completions.create(model="m", messages=USER, max_tokens=40)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=USER, max_tokens=50)
    body = caught.value.response.json()
    message = body.get("message") or body["error"]["message"]
    assert caught.value.status_code == 400
    assert message == TOTAL_OVERFLOW[fmt]


def test_max_completion_tokens_also_counts(srv: FakeLLMServer) -> None:
    srv.counter = fixed(60)
    with pytest.raises(openai.BadRequestError, match="60 in the messages, 41 in the completion"):
        oai(srv).chat.completions.create(model="m", messages=USER, max_completion_tokens=41)


@pytest.mark.parametrize(("fmt", "enforce"), [("openai", False), ("llamacpp", None)])
def test_max_tokens_not_enforced_when_disabled_or_provider_does_not(fmt: Any, enforce: Any) -> None:
    server = FakeLLMServer(
        context_window=WINDOW, counter=fixed(60), overflow_format=fmt, enforce_max_tokens=enforce
    )
    with server:
        reply = oai(server).chat.completions.create(model="m", messages=USER, max_tokens=90)
    assert reply.choices[0].message.content == "ok"


def test_anthropic_endpoint_always_uses_anthropic_format() -> None:
    server = FakeLLMServer(context_window=WINDOW, counter=fixed(150), overflow_format="vllm")
    with server, pytest.raises(anthropic.BadRequestError) as caught:
        claude(server).messages.create(model="c", max_tokens=10, messages=USER)
    assert caught.value.status_code == 400
    assert caught.value.response.json() == INPUT_OVERFLOW["anthropic"]


def test_ollama_truncates_silently() -> None:
    server = FakeLLMServer(context_window=WINDOW, counter=fixed(150), overflow_format="ollama")
    with server:
        reply = oai(server).chat.completions.create(model="m", messages=USER, max_tokens=500)
    assert reply.choices[0].message.content == "ok"
    assert reply.usage is not None and reply.usage.prompt_tokens == WINDOW


def test_real_count_rejects_a_long_conversation(srv: FakeLLMServer) -> None:
    client = oai(srv)
    fits: Any = [{"role": "user", "content": "word " * 50}]
    assert client.chat.completions.create(model="m", messages=fits)
    too_long: Any = [{"role": "user", "content": "word " * 120}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=too_long)
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "context_length_exceeded"
    assert f"resulted in {default_counter({'messages': too_long})} tokens" in caught.value.message


# -- summaries -----------------------------------------------------------------------------

TRANSCRIPT = [
    {"role": "system", "content": f"Summarise the conversation. {DEFAULT_SUMMARY_MARKER}"},
    {"role": "user", "content": "Fix the failing test in tests/test_io.py\nIt crashes on empty input."},
    {"role": "assistant", "content": "I read src/pkg/io.py and found the bug."},
    {"role": "user", "content": "Now update README.md too."},
]


def summary_json(client: openai.OpenAI, messages: Any = TRANSCRIPT) -> str:
    reply = client.chat.completions.create(model="m", messages=messages)
    return reply.choices[0].message.content or ""


def test_summary_request_returns_five_field_json_and_leaves_queue() -> None:
    with FakeLLMServer(replies=["scripted"]) as server:
        summary = json.loads(summary_json(oai(server)))
        normal = oai(server).chat.completions.create(model="m", messages=USER)
    assert tuple(summary) == SUMMARY_FIELDS
    assert summary["task_overview"] == "Fix the failing test in tests/test_io.py"
    assert "Now update README.md too." in summary["current_state"]
    for path in ("tests/test_io.py", "src/pkg/io.py", "README.md"):
        assert path in summary["important_discoveries"]
    assert normal.choices[0].message.content == "scripted"


def test_summary_marker_in_last_user_message_and_custom_marker() -> None:
    with FakeLLMServer(summary_marker="[[SUM]]") as server:
        asked = [{"role": "user", "content": "history...\n[[SUM]] please summarise"}]
        assert set(json.loads(summary_json(oai(server), asked))) == set(SUMMARY_FIELDS)
        earlier = [{"role": "user", "content": "[[SUM]]"}, {"role": "user", "content": "hi"}]
        assert summary_json(oai(server), earlier) == "ok"


def test_summary_responder_overrides_the_builder() -> None:
    with FakeLLMServer(summary_responder=lambda body: Reply(text="custom")) as server:
        assert summary_json(oai(server)) == "custom"


def test_summary_failure_kinds_and_runtime_switch(srv: FakeLLMServer) -> None:
    srv.context_window = 10_000
    client = oai(srv)
    srv.summary_failure = "malformed_json"
    with pytest.raises(json.JSONDecodeError):
        json.loads(summary_json(client))
    srv.summary_failure = "empty"
    assert summary_json(client) == ""
    srv.summary_failure = "http_500"
    with pytest.raises(openai.InternalServerError) as caught:
        summary_json(client)
    assert caught.value.status_code == 500
    assert caught.value.body == {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert oai(srv).chat.completions.create(model="m", messages=USER)  # normal calls unaffected
    srv.summary_failure = None
    assert set(json.loads(summary_json(client))) == set(SUMMARY_FIELDS)


def test_summary_timeout_trips_the_client_timeout() -> None:
    threads = threading.active_count()
    server = FakeLLMServer(summary_failure="timeout", timeout_seconds=3)
    with server, pytest.raises(openai.APITimeoutError):
        summary_json(oai(server, timeout=0.2))
    # stop() ends the 3 s stall, so the stalled handler thread is gone well before that.
    deadline = time.monotonic() + 1
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= threads


def test_fail_next_summaries_only_for_count(srv: FakeLLMServer) -> None:
    srv.context_window = 10_000
    srv.fail_next_summaries("http_500", 2)
    client = oai(srv)
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            summary_json(client)
    assert set(json.loads(summary_json(client))) == set(SUMMARY_FIELDS)


def test_anthropic_summary_500_is_anthropic_shaped(srv: FakeLLMServer) -> None:
    srv.context_window = 10_000
    srv.fail_next_summaries("http_500")
    with pytest.raises(anthropic.InternalServerError) as caught:
        claude(srv).messages.create(model="c", max_tokens=100, system=DEFAULT_SUMMARY_MARKER, messages=USER)
    assert caught.value.response.json() == {
        "type": "error",
        "error": {"type": "api_error", "message": "Internal server error"},
    }


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
