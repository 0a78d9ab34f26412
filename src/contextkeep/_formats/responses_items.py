"""OpenAI Responses items kept exactly, for an upstream that speaks Responses itself.

Input (and output) items become OpenAI chat messages that carry the items they were read
from under :data:`ITEMS` (`from_openai` keeps that key in `Message.extra`, so it is stored
with the transcript):

- a `message` item of a user, system or developer is one message (`instructions`, a system
  message marked :data:`INSTRUCTIONS`);
- the items of one assistant turn (`reasoning`, assistant `message`, `function_call`,
  `custom_tool_call`, any other call or server-side item) are one assistant message: its text,
  its calls (by `call_id`), the reasoning summaries as its reasoning;
- a `function_call_output` (or any other `*_output` with a `call_id`) is a tool result.

Back to items (:func:`view_items`), a message that compaction left as it was is its items,
byte for byte (reasoning with its `encrypted_content`, ids, statuses). A message it changed
(a cut tool result, a summary) is re-expressed from its content; of its items, the reasoning
goes as it was while its text reads the same, and items with no content of their own
(a web search call) always go as they were.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from contextkeep._errors import MessageFormatError
from contextkeep._formats.openai import from_openai
from contextkeep._messages import FilePart, ImagePart, Message, TextPart, ToolCall

__all__ = ["INSTRUCTIONS", "ITEMS", "history", "reply_history", "view_items"]

ITEMS: Final = "responses_items"
"""The chat-message key (then `Message.extra` key) holding the items a message was read from."""
INSTRUCTIONS: Final = "responses_instructions"
"""Marks the system message made from a request's `instructions`."""
_FORMAT = "responses"
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})
_TURN_ENDS = frozenset({"user", "system", "developer"})


def history(items: str | Sequence[Any], instructions: str | None = None) -> list[dict[str, Any]]:
    """The chat messages of `instructions` and the `input` items, each carrying its items."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions, INSTRUCTIONS: True})
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items, ITEMS: [{"role": "user", "content": items}]}]
    turn: list[Mapping[str, Any]] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise MessageFormatError(_FORMAT, "an input item must be an object", index=index)
        kind, role = item.get("type", "message"), item.get("role")
        if role is not None and not isinstance(role, str):
            raise MessageFormatError(_FORMAT, f"unsupported message role {role!r}", index=index)
        ends = (kind == "message" and role in _TURN_ENDS) or _is_output(item)
        if not ends:
            turn.append(item)
            continue
        if turn:
            out.append(_turn(turn, index))
            turn = []
        out.append(_output(item) if _is_output(item) else _said(item, index))
    if turn:
        out.append(_turn(turn, len(items)))
    return out


def reply_history(output: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A response's `output` items as the one assistant message they are."""
    return _turn(list(output), 0)


def _is_output(item: Mapping[str, Any]) -> bool:
    return str(item.get("type", "")).endswith("_output") and "call_id" in item


def _said(item: Mapping[str, Any], index: int) -> dict[str, Any]:
    role = item.get("role")
    if role not in _TURN_ENDS:
        raise MessageFormatError(_FORMAT, f"unsupported message role {role!r}", index=index)
    return {"role": role, "content": _content(item.get("content"), index), ITEMS: [dict(item)]}


def _output(item: Mapping[str, Any]) -> dict[str, Any]:
    output = item.get("output")
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return {"role": "tool", "tool_call_id": str(item["call_id"]), "content": text, ITEMS: [dict(item)]}


def _turn(items: list[Mapping[str, Any]], index: int) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    summaries: list[str] | None = None
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            texts.append(_text(item.get("content"), index))
        elif kind == "reasoning":
            summaries = [*(summaries or []), *(str(s.get("text", "")) for s in item.get("summary") or [])]
        elif "call_id" in item:
            calls.append(_call(item))
    out: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
    if calls:
        out["tool_calls"] = calls
    elif not texts:
        out["content"] = ""
    if summaries is not None:
        out["reasoning_content"] = "\n\n".join(summaries)
    return {**out, ITEMS: [dict(i) for i in items]}


def _call(item: Mapping[str, Any]) -> dict[str, Any]:
    arguments = item.get("arguments", item.get("input"))
    if not isinstance(arguments, str):
        arguments = json.dumps(item.get("action"), ensure_ascii=False)
    name = str(item.get("name") or item.get("type"))
    return {
        "id": str(item["call_id"]),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _text(content: Any, index: int) -> str:
    value = _content(content, index)
    if isinstance(value, str):
        return value
    return "".join(str(p.get("text", "")) for p in value if p.get("type") == "text")


def _content(content: Any, index: int) -> Any:
    """A message item's content as chat content: a string, or parts (text, others kept as sent)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MessageFormatError(_FORMAT, "content must be a string or a list of parts", index=index)
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, Mapping):
            raise MessageFormatError(_FORMAT, "a content part must be an object", index=index)
        kind = part.get("type")
        if not isinstance(kind, str):
            raise MessageFormatError(_FORMAT, "a content part needs a string type", index=index)
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text", part.get("refusal", "")))})
        else:
            parts.append(dict(part))  # an image or file part: sent back as it came
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def view_items(view: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """`(instructions, input)` of a view: unchanged messages as their own items, others re-expressed."""
    instructions: str | None = None
    items: list[dict[str, Any]] = []
    for m in view:
        if m.role == "system" and m.extra.get(INSTRUCTIONS) and instructions is None and not items:
            instructions = m.text
            continue
        kept = m.extra.get(ITEMS)
        if isinstance(kept, list) and _unchanged(m, kept):
            items.extend(kept)
        else:
            items.extend(_restated(m, kept if isinstance(kept, list) else []))
    return instructions, items


def _unchanged(m: Message, kept: list[Any]) -> bool:
    """Whether `m` still reads as the items it was made from (same content, calls and reasoning)."""
    if m.role == "assistant":
        again = _turn(kept, 0)
    elif m.role == "tool":
        again = _output(kept[0])
    else:
        again = {"role": m.role, "content": _content(kept[0].get("content"), 0)}
    return from_openai([again])[0].key == m.key


def _restated(m: Message, kept: list[Any]) -> list[dict[str, Any]]:
    if m.role == "tool":
        first = kept[0] if kept else {}
        kind = first.get("type", "function_call_output")
        return [{"type": kind, "call_id": m.tool_call_id, "output": m.text}]
    if m.role != "assistant":
        role = m.extra.get("role", m.role) if m.role == "system" else m.role
        return [{"type": "message", "role": role, "content": _restated_content(m)}]
    out: list[dict[str, Any]] = []
    reasoning = [i for i in kept if i.get("type") == "reasoning"]
    reasoning_sent = bool(reasoning) and _turn(reasoning, 0).get("reasoning_content") == m.reasoning
    if reasoning_sent:
        out.extend(reasoning)
    # Items with no content of their own (server-side tool calls) stay as they were.
    out.extend(i for i in kept if i.get("type") not in ("reasoning", "message") and "call_id" not in i)
    if m.text:
        out.append({"type": "message", "role": "assistant", "content": m.text})
    by_id = {str(i["call_id"]): i for i in kept if "call_id" in i}
    out.extend(
        _restated_call(c, by_id.get(c.id), keep_id=reasoning_sent or not reasoning) for c in m.tool_calls
    )
    return out


def _restated_call(call: ToolCall, item: Mapping[str, Any] | None, *, keep_id: bool) -> dict[str, Any]:
    if item is not None and _call(item)["function"] == {"name": call.name, "arguments": call.arguments}:
        # An item id needs the reasoning item it followed: dropped when that is not sent.
        return dict(item) if keep_id else {k: v for k, v in item.items() if k != "id"}
    return {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments}


def _restated_content(m: Message) -> Any:
    if m.content is None or isinstance(m.content, str):
        return m.content or ""
    kind = "output_text" if m.role == "assistant" else "input_text"
    parts: list[dict[str, Any]] = []
    for p in m.content:
        if isinstance(p, TextPart):
            parts.append({"type": kind, "text": p.text})
        elif isinstance(p, FilePart | ImagePart) and isinstance(p.extra.get("openai_part"), Mapping):
            parts.append(dict(p.extra["openai_part"]))
    return parts
