"""OpenAI Responses API items, to and from OpenAI chat messages (for a chat-only upstream).

`input` items become chat messages: `message` items keep their role (text parts joined into
one string, images as `image_url` parts), consecutive `function_call` items join the
assistant message before them as its tool calls, and `function_call_output` items become
`tool` messages. `reasoning` items have no place in a chat request and are left out. A
reply becomes output items in the order a client echoes them back: the `message`, then one
`function_call` per call, so the echoed items convert to the very message recorded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from contextkeep._errors import MessageFormatError
from contextkeep._messages import Message

__all__ = ["chat_messages", "chat_tools", "output_items"]

_FORMAT = "responses"
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})


def chat_messages(items: str | Sequence[Any], instructions: str | None = None) -> list[dict[str, Any]]:
    """The chat messages of `instructions` (a system message) and the `input` items."""
    out: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items}]
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise MessageFormatError(_FORMAT, "an input item must be an object", index=index)
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role"), "content": _content(item.get("content"), index)})
        elif kind == "function_call":
            call = {
                "id": str(item.get("call_id")),
                "type": "function",
                "function": {"name": str(item.get("name")), "arguments": str(item.get("arguments", ""))},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last["tool_calls"] = [*last.get("tool_calls", ()), call]
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id")), "content": text})
        elif kind != "reasoning":
            raise MessageFormatError(_FORMAT, f"unsupported input item type {kind!r}", index=index)
    return out


def _content(content: Any, index: int) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MessageFormatError(_FORMAT, "content must be a string or a list of parts", index=index)
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text", part.get("refusal", "")))})
        elif kind == "input_image":
            parts.append({"type": "image_url", "image_url": {"url": part.get("image_url")}})
        else:
            raise MessageFormatError(_FORMAT, f"unsupported content part {kind!r}", index=index)
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def chat_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Responses function tools as chat tools; any other kind cannot reach a chat upstream."""
    out: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        if tool.get("type") != "function":
            raise MessageFormatError(
                _FORMAT, f"tool type {tool.get('type')!r} needs a Responses upstream", index=index
            )
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
        out.append({"type": "function", "function": function})
    return out


def output_items(reply: Message, message_id: str) -> list[dict[str, Any]]:
    """A reply as output items: its text as a `message` (id `message_id`), then its calls."""
    items: list[dict[str, Any]] = []
    if reply.text or not reply.tool_calls:
        text = {"type": "output_text", "text": reply.text, "annotations": []}
        message = {"type": "message", "id": message_id, "status": "completed", "role": "assistant"}
        items.append({**message, "content": [text]})
    items.extend(
        {
            "type": "function_call",
            "id": f"fc_{call.id}",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "status": "completed",
        }
        for call in reply.tool_calls
    )
    return items
