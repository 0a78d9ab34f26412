"""The fake server's OpenAI Responses endpoint: requests read as chat, completions rendered as Responses."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from contextkeep.testing._render import CREATED, SSEEvent, argument_pieces, text_pieces
from contextkeep.testing._replies import Completion

__all__ = ["chat_view", "response_events", "response_object"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return json.dumps(content)


def chat_view(items: list[Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """The request as a chat-completions body (what responders and the counter read).

    `items` is the whole input (a stored previous response's included); reasoning items count by
    their summary, an item of another kind by its JSON.
    """
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item.get("role"), "content": _text(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": _text(item.get("output"))}
            )
        elif kind == "reasoning":
            summary = "".join(str(s.get("text", "")) for s in item.get("summary") or [])
            messages.append({"role": "assistant", "content": None, "reasoning_content": summary})
        else:
            messages.append({"role": "user", "content": json.dumps(item)})
    view = {k: v for k, v in body.items() if k not in ("input", "instructions")}
    return {**view, "messages": messages}


def _output(c: Completion) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if c.reply.reasoning is not None:
        summary = [{"type": "summary_text", "text": c.reply.reasoning}]
        # An opaque blob, as OpenAI returns one: the proxy must send it back exactly.
        blob = f"gAAAA{c.number:04d}=={c.reply.reasoning[::-1]}"
        items.append(
            {"type": "reasoning", "id": f"rs_{c.number:04d}", "summary": summary, "encrypted_content": blob}
        )
    if c.reply.text or not c.reply.tool_calls:
        text = {"type": "output_text", "text": c.reply.text, "annotations": []}
        message = {"type": "message", "id": f"msg_{c.number:04d}", "status": "completed", "role": "assistant"}
        items.append({**message, "content": [text]})
    for number, spec in zip(c.tool_numbers, c.reply.tool_calls, strict=True):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{number:04d}",
                "call_id": f"call_{number:04d}",
                "name": spec.name,
                "arguments": spec.arguments_json(),
                "status": "completed",
            }
        )
    return items


def response_object(c: Completion, body: Mapping[str, Any], *, done: bool = True) -> dict[str, Any]:
    """A `response` object: completed (or incomplete when cut), or in progress with no output."""
    status = ("incomplete" if c.truncated else "completed") if done else "in_progress"
    out: dict[str, Any] = {
        "id": f"resp_{c.number:04d}",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "model": c.model,
        "output": _output(c) if done else [],
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "instructions": body.get("instructions"),
        "previous_response_id": body.get("previous_response_id"),
        "max_output_tokens": body.get("max_output_tokens"),
        "incomplete_details": {"reason": "max_output_tokens"} if c.truncated and done else None,
        "error": None,
    }
    usage = c.usage("input_tokens", "output_tokens", "total_tokens")
    if done and usage is not None:
        usage = {**usage, "input_tokens_details": {"cached_tokens": 0}}
        out["usage"] = {**usage, "output_tokens_details": {"reasoning_tokens": 0}}
    return out


def _item_events(index: int, item: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    kind = item["type"]
    if kind == "message":
        yield "response.output_item.added", {"item": {**item, "status": "in_progress", "content": []}}
        at = {"item_id": item["id"], "content_index": 0}
        part = item["content"][0]
        yield "response.content_part.added", {**at, "part": {**part, "text": ""}}
        for piece in text_pieces(part["text"]):
            yield "response.output_text.delta", {**at, "delta": piece}
        yield "response.output_text.done", {**at, "text": part["text"]}
        yield "response.content_part.done", {**at, "part": part}
    elif kind == "function_call":
        yield "response.output_item.added", {"item": {**item, "status": "in_progress", "arguments": ""}}
        for piece in argument_pieces(item["arguments"]):
            yield "response.function_call_arguments.delta", {"item_id": item["id"], "delta": piece}
        yield "response.function_call_arguments.done", {"item_id": item["id"], "arguments": item["arguments"]}
    else:
        yield "response.output_item.added", {"item": item}
    yield "response.output_item.done", {"item": item}


def response_events(c: Completion, body: Mapping[str, Any]) -> Iterator[SSEEvent]:
    """The Responses stream: created, each output item piece by piece, then completed."""
    sequence = 0

    def event(kind: str, payload: dict[str, Any]) -> SSEEvent:
        nonlocal sequence
        sequence += 1
        return kind, {"type": kind, "sequence_number": sequence, **payload}

    yield event("response.created", {"response": response_object(c, body, done=False)})
    yield event("response.in_progress", {"response": response_object(c, body, done=False)})
    for index, item in enumerate(_output(c)):
        for kind, payload in _item_events(index, item):
            yield event(kind, {"output_index": index, **payload})
    final = response_object(c, body)
    yield event(
        "response.completed" if final["status"] == "completed" else "response.incomplete", {"response": final}
    )
