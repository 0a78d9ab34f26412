"""Render a completion as an OpenAI or Anthropic response body or server-sent event stream."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from contextkeep.testing._replies import Completion

__all__ = [
    "CREATED",
    "SSEEvent",
    "anthropic_events",
    "anthropic_message",
    "argument_pieces",
    "model_list",
    "ollama_show",
    "openai_chunks",
    "openai_completion",
    "text_pieces",
]

SSEEvent = tuple[str | None, Any]
"""Event name (None for OpenAI's unnamed events) and JSON payload, or the raw text `[DONE]`."""

CREATED = 1_700_000_000
"""Fixed `created` timestamp so responses are byte-for-byte deterministic."""


def text_pieces(text: str) -> list[str]:
    """One word (with its trailing space) per chunk, so clients really reassemble a stream."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def argument_pieces(arguments: str, size: int = 8) -> list[str]:
    """Tool-call arguments in pieces of `size` characters, as providers stream them (never whole)."""
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [arguments]


def _openai_finish(c: Completion) -> str:
    if c.truncated:
        return "length"
    return "tool_calls" if c.reply.tool_calls else "stop"


def _openai_tool_calls(c: Completion) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{number:04d}",
            "type": "function",
            "function": {"name": spec.name, "arguments": spec.arguments_json()},
        }
        for number, spec in zip(c.tool_numbers, c.reply.tool_calls, strict=True)
    ]


def openai_completion(c: Completion) -> dict[str, Any]:
    """A `chat.completion` object."""
    # OpenAI sends `content: null` beside tool calls, but "" for an empty answer.
    content = c.reply.text or (None if c.reply.tool_calls else "")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if c.reply.tool_calls:
        message["tool_calls"] = _openai_tool_calls(c)
    if c.reply.reasoning is not None:
        message["reasoning_content"] = c.reply.reasoning
    body: dict[str, Any] = {
        "id": f"chatcmpl-{c.number:04d}",
        "object": "chat.completion",
        "created": CREATED,
        "model": c.model,
        "choices": [{"index": 0, "message": message, "finish_reason": _openai_finish(c), "logprobs": None}],
    }
    usage = c.usage("prompt_tokens", "completion_tokens", "total_tokens")
    return body if usage is None else {**body, "usage": usage}


def openai_chunks(c: Completion, include_usage: bool) -> Iterator[SSEEvent]:
    """`chat.completion.chunk` events; with `include_usage`, a last chunk carrying only usage."""
    base: dict[str, Any] = {"id": f"chatcmpl-{c.number:04d}", "object": "chat.completion.chunk"}
    base |= {"created": CREATED, "model": c.model}
    # OpenAI sends `usage: null` on every chunk once the client asks for usage.
    usage_slot: dict[str, Any] = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> SSEEvent:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return None, {**base, "choices": [choice], **usage_slot}

    yield chunk({"role": "assistant", "content": ""})
    if c.reply.reasoning:
        yield chunk({"reasoning_content": c.reply.reasoning})
    for piece in text_pieces(c.reply.text):
        yield chunk({"content": piece})
    for index, call in enumerate(_openai_tool_calls(c)):
        opening = {**call, "function": {"name": call["function"]["name"], "arguments": ""}}
        yield chunk({"tool_calls": [{"index": index, **opening}]})
        for piece in argument_pieces(call["function"]["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, _openai_finish(c))
    usage = c.usage("prompt_tokens", "completion_tokens", "total_tokens")
    if include_usage and usage is not None:
        yield None, {**base, "choices": [], "usage": usage}
    yield None, "[DONE]"


def _anthropic_stop(c: Completion) -> str:
    if c.truncated:
        return "max_tokens"
    return "tool_use" if c.reply.tool_calls else "end_turn"


def _anthropic_blocks(c: Completion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if c.reply.reasoning is not None:
        blocks.append({"type": "thinking", "thinking": c.reply.reasoning, "signature": "fake"})
    if c.reply.text:
        blocks.append({"type": "text", "text": c.reply.text})
    for number, spec in zip(c.tool_numbers, c.reply.tool_calls, strict=True):
        tool_id = f"toolu_{number:04d}"
        blocks.append({"type": "tool_use", "id": tool_id, "name": spec.name, "input": spec.arguments})
    return blocks


def anthropic_message(c: Completion) -> dict[str, Any]:
    """A Messages API `message` object."""
    body: dict[str, Any] = {
        "id": f"msg_{c.number:04d}",
        "type": "message",
        "role": "assistant",
        "model": c.model,
        "content": _anthropic_blocks(c),
        "stop_reason": _anthropic_stop(c),
        "stop_sequence": None,
    }
    usage = c.usage("input_tokens", "output_tokens", None)
    return body if usage is None else {**body, "usage": usage}


def _block_events(index: int, block: dict[str, Any]) -> Iterator[SSEEvent]:
    kind = block["type"]
    if kind == "thinking":
        empty, deltas = (
            {**block, "thinking": "", "signature": ""},
            [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ],
        )
    elif kind == "text":
        empty = {**block, "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in text_pieces(block["text"])]
    else:
        empty = {**block, "input": {}}
        pieces = argument_pieces(json.dumps(block["input"]))
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
    yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": empty}
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def anthropic_events(c: Completion) -> Iterator[SSEEvent]:
    """Messages API stream events. Usage is always sent: the SDK's accumulator requires it."""
    start = {**anthropic_message(c), "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": c.prompt_tokens, "output_tokens": 0}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(_anthropic_blocks(c)):
        yield from _block_events(index, block)
    delta = {"stop_reason": _anthropic_stop(c), "stop_sequence": None}
    usage = {"output_tokens": c.completion_tokens}
    yield "message_delta", {"type": "message_delta", "delta": delta, "usage": usage}
    yield "message_stop", {"type": "message_stop"}


def model_list(model: str, window: int) -> dict[str, Any]:
    """`GET /v1/models` as vLLM answers it: the one model, with its `max_model_len`."""
    entry = {"id": model, "object": "model", "created": CREATED, "owned_by": "contextkeep"}
    entry |= {"root": model, "parent": None, "max_model_len": window}
    return {"object": "list", "data": [entry]}


def ollama_show(architecture: str, window: int) -> dict[str, Any]:
    """`POST /api/show` as Ollama answers it: the window as `num_ctx` and `<architecture>.context_length`."""
    return {
        "parameters": f"num_ctx {window}",
        "details": {"format": "gguf", "family": architecture},
        "model_info": {"general.architecture": architecture, f"{architecture}.context_length": window},
        "capabilities": ["completion", "tools"],
    }
