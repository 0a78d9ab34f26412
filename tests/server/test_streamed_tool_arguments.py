"""Streamed through the proxy, tool-call arguments reach the client piece by piece, as the upstream sends them.

The fake upstream streams every call's arguments in several pieces; each endpoint and kind
of upstream must pass them on as deltas before the reply ends, not as one final chunk.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import ResponseFunctionToolCall

from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support.proxy_fixtures import anthropic_client, openai_client

ARGUMENTS = {"name": "worker-7.log", "lines": 400}
CALLS = [ToolCallSpec("read_log", ARGUMENTS), ToolCallSpec("read_log", {"name": "worker-8.log"})]
CHAT_TOOL: Any = {"type": "function", "function": {"name": "read_log", "parameters": {"type": "object"}}}
RESPONSES_TOOL: Any = {"type": "function", "name": "read_log", "parameters": {"type": "object"}}
ANTHROPIC_TOOL: Any = {"name": "read_log", "input_schema": {"type": "object"}}


def answer(body: Any) -> Reply:
    return Reply(text="Reading two logs.", reasoning="two logs to read", tool_calls=CALLS)


@pytest.fixture(params=["chat-only", "full"])
def served(request, start_proxy):
    full = request.param == "full"
    return start_proxy(FakeLLMServer(responder=answer, messages_api=full, responses_api=full), window=8192)


def test_chat_completions_arguments_arrive_as_deltas(served):
    client = openai_client(served)
    stream = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "Go."}], tools=[CHAT_TOOL], stream=True
    )
    pieces: dict[int, list[str]] = {}
    for chunk in stream:
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if call.function and call.function.arguments:
                pieces.setdefault(call.index, []).append(call.function.arguments)
    assert all(len(p) > 1 for p in pieces.values())
    assert [json.loads("".join(p)) for p in pieces.values()] == [dict(c.arguments) for c in CALLS]


def test_messages_input_json_arrives_as_deltas(served):
    client = anthropic_client(served)
    request: Any = {
        "model": "fake-model",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "Go."}],
        "tools": [ANTHROPIC_TOOL],
    }
    with client.messages.stream(**request) as events:
        seen = list(events)
        final = events.get_final_message()
    starts = {e.index: e.content_block for e in seen if e.type == "content_block_start"}
    pieces: dict[int, list[str]] = {}
    for e in seen:
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta":
            pieces.setdefault(e.index, []).append(e.delta.partial_json)
    assert [starts[i].type for i in pieces] == ["tool_use", "tool_use"]
    assert all(len(p) > 1 for p in pieces.values())
    assert [json.loads("".join(p)) for p in pieces.values()] == [dict(c.arguments) for c in CALLS]
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [u.input for u in uses] == [dict(c.arguments) for c in CALLS]
    [text] = [b for b in final.content if b.type == "text"]
    assert text.text == "Reading two logs."


def test_responses_function_call_arguments_arrive_as_deltas(served):
    client = openai_client(served)
    events: list[Any] = list(
        client.responses.create(model="fake-model", input="Go.", tools=[RESPONSES_TOOL], stream=True)
    )
    added = {e.output_index: e.item for e in events if e.type == "response.output_item.added"}
    pieces: dict[int, list[str]] = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            assert added[e.output_index].type == "function_call" and added[e.output_index].id == e.item_id
            pieces.setdefault(e.output_index, []).append(e.delta)
    assert all(len(p) > 1 for p in pieces.values())
    assert [json.loads("".join(p)) for p in pieces.values()] == [dict(c.arguments) for c in CALLS]
    final = events[-1].response
    calls = [i for i in final.output if isinstance(i, ResponseFunctionToolCall)]
    assert [json.loads(c.arguments) for c in calls] == [dict(c.arguments) for c in CALLS]
    assert final.output_text == "Reading two logs."
    assert [final.output.index(c) for c in calls] == sorted(pieces)  # the places they streamed in
