"""The OpenAI Agents SDK's history (Responses input items) as neutral messages, and back.

An input item becomes one message, except the items one model response made (reasoning,
assistant text, function calls, hosted-tool items), which become one assistant message:

- a user, system or developer message -> a user or system message;
- a run of reply items -> one assistant message: the text of its output messages (and the
  JSON of hosted-tool items, so they are counted), its calls (`call_id`) as tool calls, its
  reasoning summaries as reasoning; the items themselves ride along in `extra`;
- a tool's output (`function_call_output`, `computer_call_output`, ...) -> a tool result (one
  that is neither text nor parts, a screenshot say, rides along whole and is sent as it is);
- any other item (an MCP approval response, ...) -> a user message holding its JSON.

Every message keeps what it came from in `extra` (a reply its items; a message or a result the
item without its content), so `to_items` gives back equal items for a message the view leaves
as it is, and the item with the new content for one it masked.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

from contextkeep._messages import ContentPart, FilePart, ImagePart, Message, TextPart, ToolCall

__all__ = ["Converted", "Item", "ItemHistory", "reply_message", "to_items"]

Item = Mapping[str, Any]
"""A Responses input item (`TResponseInputItem`), as the SDK passes it: a dict."""

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_CALLS = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "shell_call",
        "apply_patch_call",
        "computer_call",
        "local_shell_call",
        "tool_search_call",
        "program",
    }
)
"""Calls the SDK runs itself: each pairs by `call_id` with the output item the SDK adds."""
_RESULTS = frozenset({*(f"{kind}_output" for kind in _CALLS - {"tool_search_call"}), "tool_search_output"})
_REPLIES = frozenset(
    {
        "message",
        "reasoning",
        *_CALLS,
        "file_search_call",
        "web_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "compaction",
    }
)
"""What a model response holds (with an assistant `message`)."""


def _kind(item: Item) -> str:
    """`input` (user/system message), `result` (a tool's output), `reply` (what a model made) or `other`."""
    kind = item.get("type", "message")
    if kind == "message":
        return "reply" if item.get("role") == "assistant" else "input"
    if kind in _RESULTS and isinstance(item.get("call_id"), str):
        return "result"
    return "reply" if kind in _REPLIES else "other"


def _parts(content: Any) -> str | tuple[ContentPart, ...] | None:
    """Message content or a tool's output: a string as it is, a list as parts (extras keep the rest)."""
    if content is None or isinstance(content, str):
        return content
    parts: list[ContentPart] = []
    for part in content:
        kind = part.get("type")
        if kind in _TEXT_PARTS:
            parts.append(TextPart(str(part.get("text", "")), {k: v for k, v in part.items() if k != "text"}))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            rest = {k: v for k, v in part.items() if k != "image_url"}
            parts.append(ImagePart(part["image_url"], extra={"part": rest}))
        else:
            parts.append(FilePart("", media_type=str(kind), extra={"part": dict(part)}))
    return tuple(parts)


def _content(parts: str | tuple[ContentPart, ...] | None) -> Any:
    """The inverse of `_parts`; a part the view made (a media note) becomes `input_text`."""
    if parts is None or isinstance(parts, str):
        return parts or ""
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append({"type": "input_text", **p.extra, "text": p.text})
        elif isinstance(p, ImagePart):
            out.append({**p.extra.get("part", {"type": "input_image"}), "image_url": p.url})
        else:
            out.append(dict(p.extra.get("part", {"type": p.media_type or "input_file"})))
    return out


def _reply_text(item: Item) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text") or p.get("refusal") or "") for p in content or ())


def _arguments(item: Item) -> str:
    for key in ("arguments", "input"):  # function calls, custom tool calls
        if isinstance(item.get(key), str):
            return str(item[key])
    rest = {k: v for k, v in item.items() if k not in ("id", "call_id", "type", "status")}
    return json.dumps(rest, ensure_ascii=False, sort_keys=True)


def reply_message(items: Sequence[Item]) -> Message:
    """The assistant message of one model response's items (or a run of them in a history)."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "reasoning":
            reasoning += [str(s.get("text", "")) for s in item.get("summary") or ()]
            reasoning += [str(c.get("text", "")) for c in item.get("content") or ()]
        elif kind == "message":
            texts.append(_reply_text(item))
        elif kind in _CALLS and isinstance(item.get("call_id"), str):
            calls.append(ToolCall(item["call_id"], str(item.get("name") or kind), _arguments(item)))
        else:  # a hosted tool's call and result (web search, MCP, ...): counted as what it is
            texts.append(json.dumps(item, ensure_ascii=False, sort_keys=True))
    return Message(
        "assistant",
        "\n".join(t for t in texts if t) or None,
        tool_calls=tuple(calls),
        reasoning="\n".join(reasoning) or None,
        extra={"items": list(items)},
    )


def _message(item: Item, kind: str) -> Message:
    if kind == "other":  # an item the SDK or the user adds (an MCP approval, ...): sent as it is
        text = json.dumps(item, ensure_ascii=False, sort_keys=True)
        return Message("user", text, extra={"item": dict(item)})
    if kind == "result":
        output = item.get("output")
        if not isinstance(output, str | list):  # a screenshot, a tool search's tools: sent as they are
            text = json.dumps(output if output is not None else item, ensure_ascii=False, sort_keys=True)
            return Message("tool", text, tool_call_id=item["call_id"], extra={"item": dict(item)})
        rest = {k: v for k, v in item.items() if k != "output"}
        return Message("tool", _parts(output), tool_call_id=item["call_id"], extra=rest)
    rest = {k: v for k, v in item.items() if k != "content"}
    return Message("user" if item["role"] == "user" else "system", _parts(item.get("content")), extra=rest)


def to_items(m: Message) -> list[dict[str, Any]]:
    """The input items of a view message: equal to its source items while the view left it as it was."""
    if m.role == "assistant":
        items = m.extra.get("items")
        if isinstance(items, list):
            return [dict(item) for item in items]
        calls = [
            {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
            for c in m.tool_calls
        ]
        return [{"role": "assistant", "content": m.text}, *calls] if m.text else calls
    if "item" in m.extra:
        return [dict(m.extra["item"])]
    if m.role == "tool":
        base = m.extra or {"type": "function_call_output", "call_id": m.tool_call_id}
        return [{**base, "output": _content(m.content)}]
    return [{**(m.extra or {"role": m.role}), "content": _content(m.content)}]


Converted = tuple[Message, tuple[Item, ...]]
"""A message of the history, with the items it came from."""


class ItemHistory:
    """Converts the SDK's whole history before each call, once per item.

    The runner passes the previous call's items again, then what was added since: the common
    prefix keeps its messages, and the items after it start a new message (so a reply that
    followed another with nothing between stays its own message, as it was recorded).
    """

    def __init__(self) -> None:
        self.kept = 0
        """How many messages of the last `convert` the call before had already converted."""
        self.conversions = 0
        """Items converted so far (each new one once)."""
        self._items: list[Item] = []
        self._ends: list[int] = []
        """Index after the last item of each message."""
        self._converted: list[Converted] = []

    def convert(self, items: Sequence[Item]) -> list[Converted]:
        """Each message of `items` with the items it came from."""
        known = self._items
        same = len(known) if known == items[: len(known)] else 0  # the usual case, compared in C
        limit = min(len(known), len(items))
        while same < limit and items[same] == known[same]:
            same += 1
        self.kept = bisect_right(self._ends, same)
        start = self._ends[self.kept - 1] if self.kept else 0
        ends, converted = _grouped(items, start)
        self.conversions += len(items) - start
        self._items = list(items)
        self._ends = self._ends[: self.kept] + ends
        self._converted = self._converted[: self.kept] + converted
        return list(self._converted)

    def recorded(self, reply: Message) -> None:
        """The reply to the items last converted; one without items stays in as an empty message.

        The runner leaves such a reply out of the next history; in the converted one it stays
        where it was recorded (it sends nothing), so the history still continues the transcript.
        """
        if not reply.extra.get("items"):
            self._ends.append(len(self._items))
            self._converted.append((reply, ()))


def _grouped(items: Sequence[Item], start: int) -> tuple[list[int], list[Converted]]:
    """The messages of `items[start:]`, and the index after each one's last item."""
    ends: list[int] = []
    converted: list[Converted] = []
    run: list[Item] = []
    for i in range(start, len(items)):
        item, kind = items[i], _kind(items[i])
        if kind == "reply":
            run.append(item)
            continue
        if run:
            ends.append(i)
            converted.append((reply_message(run), tuple(run)))
            run = []
        ends.append(i + 1)
        converted.append((_message(item, kind), (item,)))
    if run:
        ends.append(len(items))
        converted.append((reply_message(run), tuple(run)))
    return ends, converted
