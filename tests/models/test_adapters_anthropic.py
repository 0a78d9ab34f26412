"""The Anthropic adapter through the real anthropic SDK against the fake LLM server."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from contextkeep._errors import ContextOverflowError, ModelError, OverflowPhase
from contextkeep._messages import Message, ToolCall
from contextkeep._usage import UsageSource
from contextkeep.models import AnthropicAdapter, ModelAdapter, ProviderError
from contextkeep.testing import FakeLLMServer, Reply
from support import adapters, closing
from support.adapters import ANTHROPIC_TOOL, CAT, LS, OPENAI_TOOL, VIEW, WINDOW, fixed, last_body

# The shared fixture; bound to a name here so pytest finds it in this module.
srv = adapters.srv


def claude_client(server: FakeLLMServer) -> anthropic.AsyncAnthropic:
    http = anthropic.DefaultAsyncHttpxClient(verify=False)
    return closing(
        anthropic.AsyncAnthropic(
            base_url=server.anthropic_base_url, api_key="k", max_retries=0, http_client=http
        )
    )


def claude(server: FakeLLMServer, **kwargs: Any) -> AnthropicAdapter:
    return AnthropicAdapter(server.model, client=claude_client(server), **kwargs)


async def test_anthropic_text_reply_system_apart_and_default_max_tokens(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply(text="Three files.", reasoning="look first"))
    adapter = claude(srv, default_max_tokens=77)
    reply = await adapter.complete(VIEW)

    assert isinstance(adapter, ModelAdapter)
    body = last_body(srv)
    assert srv.requests[-1].path == "/v1/messages"
    assert body["system"] == "You are terse."
    assert body["messages"] == [{"role": "user", "content": "List the files."}]
    assert body["max_tokens"] == 77
    assert reply.message.text == "Three files."
    assert reply.message.reasoning == "look first"
    assert (reply.finish_reason, reply.model) == ("stop", srv.model)
    assert reply.raw.stop_reason == "end_turn"
    assert reply.usage.source is UsageSource.PROVIDER_CONFIRMED
    assert reply.usage.input_tokens == srv.counter(body)
    assert reply.usage.output_tokens is not None and reply.usage.output_tokens > 0


async def test_anthropic_tools_converted_and_tool_use_parsed(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply(tool_calls=[LS, CAT]))
    reply = await claude(srv).complete(
        VIEW, tools=[OPENAI_TOOL, ANTHROPIC_TOOL], max_tokens=30, tool_choice="required"
    )

    body = last_body(srv)
    assert body["tools"] == [
        {
            "name": "ls",
            "input_schema": OPENAI_TOOL["function"]["parameters"],  # type: ignore[index]
            "description": "List a directory.",
        },
        ANTHROPIC_TOOL,
    ]
    assert body["tool_choice"] == {"type": "any"}
    assert body["max_tokens"] == 30
    assert reply.finish_reason == "tool_calls"
    calls = [(c.id, c.name, json.loads(c.arguments)) for c in reply.message.tool_calls]
    assert calls == [("toolu_0001", "ls", {"path": "."}), ("toolu_0002", "cat", {"path": "README.md"})]


async def test_anthropic_named_tool_choice_and_tool_results_round_trip(srv: FakeLLMServer) -> None:
    call = Message("assistant", None, tool_calls=(ToolCall("toolu_1", "ls", '{"path": "."}'),))
    view = [*VIEW, call, Message("tool", "a.txt", tool_call_id="toolu_1")]
    await claude(srv).complete(
        view, tools=[OPENAI_TOOL], max_tokens=20, tool_choice={"type": "function", "function": {"name": "ls"}}
    )
    body = last_body(srv)
    assert body["tool_choice"] == {"type": "tool", "name": "ls"}
    assert body["messages"][-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"}],
    }


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "phase", "requested"),
    [
        (250, 10, OverflowPhase.INPUT_CONTEXT, 250),
        (150, 100, OverflowPhase.TOTAL_CONTEXT, 250),
    ],
)
async def test_anthropic_overflow(
    srv: FakeLLMServer, prompt: int, max_tokens: int, phase: OverflowPhase, requested: int
) -> None:
    srv.counter = fixed(prompt)
    with pytest.raises(ContextOverflowError) as caught:
        await claude(srv).complete(VIEW, max_tokens=max_tokens)
    err = caught.value
    assert (err.phase, err.limit, err.requested, err.provider) == (phase, WINDOW, requested, "anthropic")
    assert isinstance(err.__cause__, anthropic.BadRequestError)


async def test_anthropic_server_error_is_provider_error(srv: FakeLLMServer) -> None:
    srv.fail_next(500)
    with pytest.raises(ModelError) as caught:
        await claude(srv).complete(VIEW)
    err = caught.value
    assert isinstance(err, ProviderError) and not isinstance(err, ContextOverflowError)
    assert (err.status_code, err.provider) == (500, "anthropic")
    assert isinstance(err.__cause__, anthropic.InternalServerError)


async def test_anthropic_stream_assembles_reply(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply(text="alpha beta gamma", tool_calls=[LS]))
    reply = await claude(srv, stream=True).complete(VIEW, max_tokens=60)

    assert last_body(srv)["stream"] is True
    assert reply.message.text == "alpha beta gamma"
    assert [(c.name, json.loads(c.arguments)) for c in reply.message.tool_calls] == [("ls", {"path": "."})]
    assert reply.finish_reason == "tool_calls"
    assert reply.usage.input_tokens == srv.counter(last_body(srv))
    assert reply.usage.output_tokens is not None and reply.usage.output_tokens > 0


async def test_anthropic_usage_omitted_is_unavailable(srv: FakeLLMServer) -> None:
    srv.usage_mode = "omit"
    reply = await claude(srv).complete(VIEW, max_tokens=20)
    assert reply.message.text == "ok"
    assert reply.usage.source is UsageSource.UNAVAILABLE
