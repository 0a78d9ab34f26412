"""The fake LLM server's usage reports, through the real openai and anthropic SDKs over HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec, UsageMode
from support import fake_server
from support.fake_server import USER, claude, fixed, oai, tokens

# The shared fixture; bound to a name here so pytest finds it in this module.
srv = fake_server.srv


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
