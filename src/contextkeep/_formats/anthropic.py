"""Anthropic Messages API format.

System messages travel apart (the `system` parameter). An assistant's tool calls
become `tool_use` blocks; consecutive tool results become one `user` message of
`tool_result` blocks, as the API requires. Reasoning maps to a `thinking` block.
Arguments travel as parsed JSON (`input`), so a round trip preserves their value,
not their spacing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from contextkeep._errors import MessageFormatError
from contextkeep._messages import ContentPart, FilePart, ImagePart, Message, Role, TextPart, ToolCall

__all__ = ["AnthropicAssembly", "from_anthropic", "message_blocks", "to_anthropic"]

_FORMAT = "anthropic"


def to_anthropic(messages: Iterable[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """Return `(system, messages)` for the Messages API."""
    assembly = AnthropicAssembly()
    for m in messages:
        assembly.add(m)
    return assembly.result()


class AnthropicAssembly:
    """`to_anthropic`'s output built one message at a time, so it can be cut back and extended.

    Merging a tool result into the `user` message before it replaces that message's dict
    instead of extending it: a list handed out earlier never changes under its holder.
    """

    def __init__(self) -> None:
        self.system: list[str] = []
        """The system texts so far."""
        self.messages: list[dict[str, Any]] = []
        """The API messages so far."""
        # Per message added: the lengths of `system`, `messages` and the last content list before it.
        self._marks: list[tuple[int, int, int]] = []

    def __len__(self) -> int:
        return len(self._marks)

    def add(self, m: Message, blocks: list[dict[str, Any]] | None = None) -> None:
        """Append `m`; `blocks` are its `message_blocks` when already known."""
        out = self.messages
        last = out[-1]["content"] if out else None
        self._marks.append((len(self.system), len(out), len(last) if isinstance(last, list) else -1))
        if m.role == "system":
            self.system.append(m.text)
            return
        blocks = message_blocks(m) if blocks is None else blocks
        if m.role == "tool" and out and out[-1]["role"] == "user" and _all_results(out[-1]):
            out[-1] = {**out[-1], "content": [*out[-1]["content"], *blocks]}
        elif (
            m.role in ("user", "assistant")
            and isinstance(m.content, str)
            and len(blocks) == 1
            and blocks[0]["type"] == "text"
            and "cache_control" not in blocks[0]  # a client's breakpoint needs the block form
        ):
            out.append({"role": m.role, "content": m.content})
        else:
            out.append({"role": "assistant" if m.role == "assistant" else "user", "content": blocks})

    def cut(self, at: int) -> None:
        """Forget the messages added from position `at` on, as if only the first `at` were added."""
        if at >= len(self._marks):
            return
        system, count, content = self._marks[at]
        del self.system[system:], self.messages[count:], self._marks[at:]
        out = self.messages
        if content >= 0 and len(out[-1]["content"]) != content:  # tool results merged after `at`
            out[-1] = {**out[-1], "content": out[-1]["content"][:content]}

    def result(self) -> tuple[str | None, list[dict[str, Any]]]:
        """`(system, messages)` as `to_anthropic` returns them (a new list each time)."""
        return ("\n\n".join(self.system) if self.system else None), list(self.messages)


def from_anthropic(
    messages: Iterable[Mapping[str, Any]], system: str | Iterable[Mapping[str, Any]] | None = None
) -> list[Message]:
    """Convert Messages API messages (and the `system` parameter) to neutral messages."""
    out: list[Message] = []
    if isinstance(system, str):
        out.append(Message("system", system))
    elif system is not None:
        out.append(Message("system", "\n\n".join(str(b.get("text", "")) for b in system)))
    for i, d in enumerate(messages):
        role = d.get("role") if isinstance(d, Mapping) else None
        if role not in ("user", "assistant"):
            raise MessageFormatError(_FORMAT, f"role must be user or assistant, got {role!r}", index=i)
        content = d.get("content")
        if isinstance(content, str):
            out.append(Message(role, content))
        elif isinstance(content, list):
            out.extend(_from_blocks(role, content, i))
        else:
            raise MessageFormatError(_FORMAT, "content must be a string or a list of blocks", index=i)
    return out


def _all_results(message: dict[str, Any]) -> bool:
    content = message["content"]
    return isinstance(content, list) and all(b.get("type") == "tool_result" for b in content)


def message_blocks(m: Message) -> list[dict[str, Any]]:
    """The content blocks one non-system message contributes (before tool results are merged)."""
    if m.role == "tool":
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id}
        result["content"] = m.content if isinstance(m.content, str) else _content_blocks(m.content)
        if m.extra.get("is_error"):
            result["is_error"] = True
        return [result]
    blocks: list[dict[str, Any]] = []
    if m.reasoning is not None:
        thinking: dict[str, Any] = {"type": "thinking", "thinking": m.reasoning}
        if "signature" in m.extra:
            thinking["signature"] = m.extra["signature"]
        blocks.append(thinking)
    if isinstance(m.content, str):
        if m.content or not m.tool_calls:
            blocks.append({"type": "text", "text": m.content})
    else:
        blocks.extend(_content_blocks(m.content))
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _parse_arguments(c.arguments)}
        for c in m.tool_calls
    )
    return blocks


def _parse_arguments(arguments: str) -> Any:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        value = None
    # The API only takes an object; keep malformed model output visible rather than dropping it.
    return value if isinstance(value, dict) else {"raw_arguments": arguments}


def _content_blocks(content: tuple[ContentPart, ...] | None) -> list[dict[str, Any]]:
    return [_part_block(p) for p in content or ()]


def _part_block(p: ContentPart) -> dict[str, Any]:
    if isinstance(p, TextPart):
        return {"type": "text", "text": p.text}
    kind = "image" if isinstance(p, ImagePart) else "document"
    if p.url.startswith("data:") and ";base64," in p.url:
        head, data = p.url[5:].split(";base64,", 1)
        return {"type": kind, "source": {"type": "base64", "media_type": head, "data": data}}
    return {"type": kind, "source": {"type": "url", "url": p.url}}


def _from_blocks(role: str, blocks: list[Any], index: int) -> list[Message]:
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    reasoning: str | None = None
    extra: dict[str, Any] = {}
    for b in blocks:
        kind = b.get("type") if isinstance(b, Mapping) else None
        if kind == "text":
            parts.append(TextPart(str(b.get("text", ""))))
        elif kind in ("image", "document"):
            parts.append(_part_from_block(kind, b))
        elif kind == "thinking":
            reasoning = str(b.get("thinking", ""))
            if "signature" in b:
                extra["signature"] = b["signature"]
        elif kind == "tool_use":
            args = json.dumps(b.get("input", {}), ensure_ascii=False)
            calls.append(ToolCall(str(b.get("id")), str(b.get("name")), args))
        elif kind == "tool_result":
            results.append(_result_from_block(b, index))
        else:
            raise MessageFormatError(_FORMAT, f"unsupported block type {kind!r}", index=index)
    out = list(results)
    if parts or calls or reasoning is not None or not results:
        content: str | tuple[ContentPart, ...] | None
        only = parts[0] if len(parts) == 1 else None
        if not parts:
            content = None if calls else ""
        elif isinstance(only, TextPart):
            content = only.text
        else:
            content = tuple(parts)
        r: Role = "assistant" if role == "assistant" else "user"
        out.append(Message(r, content, tool_calls=tuple(calls), reasoning=reasoning, extra=extra))
    return out


def _part_from_block(kind: str, b: Mapping[str, Any]) -> ContentPart:
    source = b.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        media = source.get("media_type")
    else:
        url, media = str(source.get("url", "")), None
    return ImagePart(url, media_type=media) if kind == "image" else FilePart(url, media_type=media)


def _result_from_block(b: Mapping[str, Any], index: int) -> Message:
    content = b.get("content", "")
    if isinstance(content, list):
        parsed = _from_blocks("user", content, index)
        value: str | tuple[ContentPart, ...] | None = parsed[-1].content if parsed else ""
    else:
        value = str(content)
    extra = {"is_error": True} if b.get("is_error") else {}
    return Message("tool", value, tool_call_id=str(b.get("tool_use_id")), extra=extra)
