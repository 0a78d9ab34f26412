"""The OpenAI adapter through the real openai SDK against the fake LLM server."""

from __future__ import annotations

import json
import socket
from typing import Any

import openai
import pytest

from contextkeep._capabilities import CapacitySource
from contextkeep._errors import ContextOverflowError, OverflowPhase
from contextkeep._messages import Message
from contextkeep._usage import UsageSource
from contextkeep.models import ModelAdapter, OpenAIAdapter, ProviderError
from contextkeep.models.openai import _StreamAssembly
from contextkeep.testing import FakeLLMServer, Reply
from support import adapters, closing
from support.adapters import ANTHROPIC_TOOL, CAT, LS, OPENAI_TOOL, VIEW, WINDOW, fixed, last_body

# The shared fixture; bound to a name here so pytest finds it in this module.
srv = adapters.srv


def oai_client(server: FakeLLMServer) -> openai.AsyncOpenAI:
    # Plain HTTP: skipping certificate loading keeps each client cheap.
    http = openai.DefaultAsyncHttpxClient(verify=False)
    return closing(
        openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0, http_client=http)
    )


def oai(server: FakeLLMServer, **kwargs: Any) -> OpenAIAdapter:
    return OpenAIAdapter(server.model, client=oai_client(server), **kwargs)


# -- OpenAI replies ------------------------------------------------------------------------


async def test_openai_text_reply_with_confirmed_usage(srv: FakeLLMServer) -> None:
    srv.enqueue("Three files.")
    adapter = oai(srv)
    reply = await adapter.complete(VIEW, max_tokens=50, temperature=0)

    assert isinstance(adapter, ModelAdapter)
    assert reply.message == Message("assistant", "Three files.")
    assert (reply.finish_reason, reply.model) == ("stop", srv.model)
    assert isinstance(reply.raw, openai.types.chat.ChatCompletion)
    body = last_body(srv)
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "List the files."},
    ]
    assert (body["max_tokens"], body["temperature"], body["model"]) == (50, 0, srv.model)
    prompt = srv.counter(body)
    assert reply.usage.source is UsageSource.PROVIDER_CONFIRMED
    assert reply.usage.input_tokens == prompt
    assert reply.usage.output_tokens is not None and reply.usage.output_tokens > 0
    assert reply.usage.total_tokens == prompt + reply.usage.output_tokens


async def test_openai_parallel_tool_calls_and_tools_in_either_shape(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply(tool_calls=[LS, CAT]))
    reply = await oai(srv).complete(VIEW, tools=[OPENAI_TOOL, ANTHROPIC_TOOL], tool_choice="auto")

    assert reply.finish_reason == "tool_calls"
    assert reply.message.content is None
    calls = [(c.id, c.name, json.loads(c.arguments)) for c in reply.message.tool_calls]
    assert calls == [("call_0001", "ls", {"path": "."}), ("call_0002", "cat", {"path": "README.md"})]
    sent = last_body(srv)["tools"]
    assert sent[0] == OPENAI_TOOL
    assert sent[1] == {
        "type": "function",
        "function": {
            "name": "cat",
            "parameters": ANTHROPIC_TOOL["input_schema"],
            "description": "Print a file.",
        },
    }


async def test_openai_reasoning_content_becomes_message_reasoning(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply(text="42", reasoning="6 times 7"))
    reply = await oai(srv).complete(VIEW)
    assert (reply.message.text, reply.message.reasoning) == ("42", "6 times 7")


@pytest.mark.parametrize(
    ("mode", "source", "has_input", "has_output", "has_total"),
    [
        ("full", UsageSource.PROVIDER_CONFIRMED, True, True, True),
        ("omit", UsageSource.UNAVAILABLE, False, False, False),
        ("prompt_only", UsageSource.PROVIDER_CONFIRMED, True, False, False),
        ("completion_only", UsageSource.PROVIDER_CONFIRMED, False, True, False),
    ],
)
async def test_openai_usage_modes(
    srv: FakeLLMServer, mode: Any, source: UsageSource, has_input: bool, has_output: bool, has_total: bool
) -> None:
    srv.usage_mode = mode
    reply = await oai(srv).complete(VIEW)
    usage = reply.usage
    assert usage.source is source
    assert (usage.input_tokens is not None, usage.output_tokens is not None) == (has_input, has_output)
    assert (usage.total_tokens is not None) == has_total
    assert usage.complete == (mode == "full")
    if has_input:
        assert usage.input_tokens == srv.counter(last_body(srv))


# -- OpenAI streaming ----------------------------------------------------------------------


async def test_openai_stream_assembles_text_reasoning_and_keeps_usage(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply(text="one two three four", reasoning="count words"))
    reply = await oai(srv, stream=True).complete(VIEW, max_tokens=40)

    body = last_body(srv)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert reply.message.text == "one two three four"
    assert reply.message.reasoning == "count words"
    assert reply.message.tool_calls == ()
    assert (reply.finish_reason, reply.model) == ("stop", srv.model)
    assert reply.usage.source is UsageSource.PROVIDER_CONFIRMED
    assert reply.usage.input_tokens == srv.counter(body)
    assert reply.usage.total_tokens == reply.usage.input_tokens + (reply.usage.output_tokens or 0)
    assert isinstance(reply.raw, list) and len(reply.raw) > 4  # one chunk per word at least


async def test_openai_stream_per_call_with_parallel_tool_calls(srv: FakeLLMServer) -> None:
    srv.enqueue(Reply(tool_calls=[LS, CAT]))
    reply = await oai(srv).complete(VIEW, stream=True, stream_options={"include_obfuscation": False})

    assert last_body(srv)["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert reply.finish_reason == "tool_calls"
    assert reply.message.content is None
    calls = [(c.id, c.name, json.loads(c.arguments)) for c in reply.message.tool_calls]
    assert calls == [("call_0001", "ls", {"path": "."}), ("call_0002", "cat", {"path": "README.md"})]


async def test_openai_stream_without_usage_is_unavailable(srv: FakeLLMServer) -> None:
    srv.usage_mode = "omit"
    reply = await oai(srv, stream=True).complete(VIEW)
    assert reply.message.text == "ok"
    assert reply.usage.source is UsageSource.UNAVAILABLE


def test_stream_assembly_splits_calls_sharing_an_index() -> None:
    # Some servers send every parallel call under index 0; the id tells them apart.
    def chunk(delta: dict[str, Any], finish: str | None = None) -> Any:
        return openai.types.chat.ChatCompletionChunk.model_validate(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    def call(call_id: str | None, name: str | None, args: str) -> dict[str, Any]:
        fn = {"name": name, "arguments": args} if name else {"arguments": args}
        return {"tool_calls": [{"index": 0, "id": call_id, "function": fn}]}

    assembly = _StreamAssembly()
    for delta in (call("a", "ls", '{"pa'), call(None, None, 'th": "."}'), call("b", "cat", "{}")):
        assembly.add(chunk(delta))
    assembly.add(chunk({}, "tool_calls"))
    reply = assembly.reply()
    assert [(c.id, c.name, c.arguments) for c in reply.message.tool_calls] == [
        ("a", "ls", '{"path": "."}'),
        ("b", "cat", "{}"),
    ]
    assert reply.usage.source is UsageSource.UNAVAILABLE


# -- OpenAI errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "prompt", "max_tokens", "phase", "limit", "requested"),
    [
        ("openai", 250, None, OverflowPhase.INPUT_CONTEXT, WINDOW, 250),
        ("openai", 150, 100, OverflowPhase.TOTAL_CONTEXT, WINDOW, 250),
        ("deepseek", 150, 100, OverflowPhase.TOTAL_CONTEXT, WINDOW, 250),
        ("vllm", 150, 100, OverflowPhase.TOTAL_CONTEXT, WINDOW, 250),
        ("vllm", 150, 250, OverflowPhase.OUTPUT, WINDOW, 250),
        ("llamacpp", 260, None, OverflowPhase.INPUT_CONTEXT, WINDOW, 260),
        ("dashscope", 260, None, OverflowPhase.INPUT_CONTEXT, WINDOW, None),
    ],
)
async def test_openai_overflow_formats(
    srv: FakeLLMServer,
    fmt: Any,
    prompt: int,
    max_tokens: int | None,
    phase: OverflowPhase,
    limit: int,
    requested: int | None,
) -> None:
    srv.overflow_format, srv.counter = fmt, fixed(prompt)
    with pytest.raises(ContextOverflowError) as caught:
        await oai(srv).complete(VIEW, max_tokens=max_tokens)
    err = caught.value
    assert (err.phase, err.limit, err.requested, err.status_code) == (phase, limit, requested, 400)
    assert isinstance(err.__cause__, openai.BadRequestError)


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_server_error_is_provider_error_not_overflow(srv: FakeLLMServer, stream: bool) -> None:
    srv.fail_next(500)
    with pytest.raises(ProviderError) as caught:
        await oai(srv, stream=stream).complete(VIEW)
    err = caught.value
    assert not isinstance(err, ContextOverflowError)
    assert (err.status_code, err.provider, err.retryable) == (500, "openai", True)
    assert isinstance(err.__cause__, openai.InternalServerError)


async def test_openai_bad_request_is_not_retryable(srv: FakeLLMServer) -> None:
    srv.fail_next(400, {"error": {"message": "Invalid 'temperature': 7", "type": "invalid_request_error"}})
    with pytest.raises(ProviderError) as caught:
        await oai(srv).complete(VIEW)
    assert (caught.value.status_code, caught.value.retryable) == (400, False)
    assert "temperature" in str(caught.value)


async def test_openai_connection_error_is_retryable_provider_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    client = closing(openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0))
    with pytest.raises(ProviderError) as caught:
        await OpenAIAdapter("m", client=client).complete(VIEW)
    assert (caught.value.status_code, caught.value.retryable) == (None, True)
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)


async def test_ollama_silent_truncation_raises_when_local_count_given() -> None:
    with FakeLLMServer(context_window=50, overflow_format="ollama") as server:
        long_view = [Message("user", "word " * 300)]
        adapter = oai(server, context_window=50)
        # Without our own count the truncation is invisible: Ollama reports only what it kept.
        reply = await adapter.complete(long_view)
        assert reply.usage.input_tokens == 50
        assert "local_prompt_tokens" not in last_body(server)
        with pytest.raises(ContextOverflowError) as caught:
            await adapter.complete(long_view, local_prompt_tokens=310)
        # A prompt that fits passes the same check.
        fine = await adapter.complete(VIEW, local_prompt_tokens=20)
    err = caught.value
    assert (err.phase, err.limit, err.requested, err.provider) == (
        OverflowPhase.INPUT_CONTEXT,
        50,
        310,
        "ollama",
    )
    assert fine.message.text == "ok"


# -- capacity ------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_create_reads_window_from_models_endpoint(srv: FakeLLMServer) -> None:
    adapter = await OpenAIAdapter.create(srv.model, client=oai_client(srv), max_output_tokens=64)
    assert (adapter.spec.context_window, adapter.spec.source) == (WINDOW, CapacitySource.ENDPOINT)
    assert adapter.spec.max_output_tokens == 64
    assert srv.requests[0].path == "/v1/models"
    assert srv.requests[0].headers["authorization"] == "Bearer sk-test"


async def test_create_explicit_window_wins_without_probing(srv: FakeLLMServer) -> None:
    adapter = await OpenAIAdapter.create(srv.model, base_url=srv.base_url, api_key="k", context_window=4096)
    assert (adapter.spec.context_window, adapter.spec.source) == (4096, CapacitySource.EXPLICIT)
    assert srv.requests == []


async def test_create_unreachable_endpoint_leaves_capacity_unknown() -> None:
    base = f"http://127.0.0.1:{closed_port()}/v1"
    adapter = await OpenAIAdapter.create("no-such-model-xyz", base_url=base, api_key="k", registry=False)
    assert (adapter.spec.context_window, adapter.spec.source) == (None, CapacitySource.UNKNOWN)
    assert OpenAIAdapter("m", base_url=base, api_key="k").spec.context_window is None
