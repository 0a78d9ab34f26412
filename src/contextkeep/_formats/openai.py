"""OpenAI chat-completions messages.

`from_openai` keeps every key it does not interpret in `Message.extra` (and in
`ToolCall.extra`), so `to_openai(from_openai(d), lossless=True) == d`. Views sent
to a model use `lossless=False`, which emits only what the API accepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from contextkeep._errors import MessageFormatError
from contextkeep._messages import ContentPart, FilePart, ImagePart, Message, Role, TextPart, ToolCall

__all__ = ["from_openai", "to_openai", "view_message"]

_FORMAT = "openai"
_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content"})
# Keys whose absence must survive a lossless round trip.
_ABSENT = "_ck_absent"


def from_openai(data: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Convert a list of OpenAI chat messages; raises `MessageFormatError` naming the index."""
    return [_message_from_openai(d, i) for i, d in enumerate(data)]


def to_openai(messages: Iterable[Message], *, lossless: bool = False) -> list[dict[str, Any]]:
    """Convert messages to OpenAI chat dicts; `lossless` also restores provider extras.

    Views are converted before every model call, so text messages are converted once and
    cached by content: each call gets fresh top-level dicts whose nested values (tool calls)
    are shared and must not be mutated.
    """
    if lossless:
        return [_message_to_openai(m, True) for m in messages]
    return [_cached_view_message(m) for m in messages]


_VIEW_CACHE: dict[str, dict[str, Any]] = {}
_VIEW_CACHE_SIZE = 65_536


def _cached_view_message(m: Message) -> dict[str, Any]:
    # Parts carry provider extras the content key does not cover: convert those every time.
    if m.content is not None and not isinstance(m.content, str):
        return _message_to_openai(m, False)
    cached = _VIEW_CACHE.get(m.key)
    if cached is None:
        if len(_VIEW_CACHE) >= _VIEW_CACHE_SIZE:
            _VIEW_CACHE.clear()
        cached = _VIEW_CACHE[m.key] = _message_to_openai(m, False)
    return dict(cached)


def view_message(m: Message) -> dict[str, Any]:
    """One message as a view sends it (`to_openai` without `lossless`), freshly converted."""
    return _message_to_openai(m, False)


def _message_from_openai(d: Mapping[str, Any], index: int) -> Message:
    if not isinstance(d, Mapping):
        raise MessageFormatError(_FORMAT, f"expected an object, got {type(d).__name__}", index=index)
    raw_role = d.get("role")
    role = _ROLES.get(raw_role) if isinstance(raw_role, str) else None
    if role is None:
        raise MessageFormatError(_FORMAT, f"unknown role {raw_role!r}", index=index)
    extra: dict[str, Any] = {k: v for k, v in d.items() if k not in _MESSAGE_KEYS}
    if raw_role != role:
        extra["role"] = raw_role
    absent = [k for k in ("content", "tool_calls") if k not in d]
    if absent:
        extra[_ABSENT] = absent
    if d.get("tool_calls") is None and "tool_calls" in d:
        extra["tool_calls"] = None
    if role == "tool" and not isinstance(d.get("tool_call_id"), str):
        raise MessageFormatError(_FORMAT, "tool message without a string tool_call_id", index=index)
    reasoning = d.get("reasoning_content")
    return Message(
        role=role,
        content=_content_from_openai(d.get("content"), index),
        tool_calls=tuple(_call_from_openai(c, index) for c in d.get("tool_calls") or ()),
        tool_call_id=d.get("tool_call_id"),
        name=d.get("name"),
        reasoning=reasoning if isinstance(reasoning, str) else None,
        extra=extra,
    )


def _content_from_openai(content: Any, index: int) -> str | tuple[ContentPart, ...] | None:
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise MessageFormatError(_FORMAT, "content must be a string, a list or null", index=index)
    return tuple(_part_from_openai(p, index) for p in content)


def _part_from_openai(p: Any, index: int) -> ContentPart:
    if not isinstance(p, Mapping) or not isinstance(p.get("type"), str):
        raise MessageFormatError(_FORMAT, "content part without a type", index=index)
    kind = p["type"]
    if kind == "text":
        return TextPart(
            str(p.get("text", "")), extra={k: v for k, v in p.items() if k not in ("type", "text")}
        )
    if kind == "image_url":
        url = _image_url(p)
        if not isinstance(url, str):
            raise MessageFormatError(_FORMAT, "image_url part without a url", index=index)
        media = url[5 : url.index(";")] if url.startswith("data:") and ";" in url else None
        return ImagePart(url, media_type=media, extra={"openai_part": dict(p)})
    # Audio, files and future part kinds: keep the part itself so it converts back unchanged.
    return FilePart(url="", media_type=kind, extra={"openai_part": dict(p)})


def _call_from_openai(c: Any, index: int) -> ToolCall:
    fn = c.get("function") if isinstance(c, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise MessageFormatError(_FORMAT, "tool call without function.name", index=index)
    if not isinstance(c.get("id"), str):
        raise MessageFormatError(_FORMAT, "tool call without a string id", index=index)
    args = fn.get("arguments", "")
    return ToolCall(
        id=c["id"],
        name=fn["name"],
        arguments=args if isinstance(args, str) else "",
        extra={k: v for k, v in c.items() if k not in ("id", "function")},
    )


def _message_to_openai(m: Message, lossless: bool) -> dict[str, Any]:
    absent = cast(list[str], m.extra.get(_ABSENT, [])) if lossless else []
    out: dict[str, Any] = {"role": m.extra.get("role", m.role) if lossless else m.role}
    if "content" not in absent:
        out["content"] = _content_to_openai(m.content)
    if m.tool_calls:
        out["tool_calls"] = [_call_to_openai(c, lossless) for c in m.tool_calls]
    elif lossless and "tool_calls" in m.extra:
        out["tool_calls"] = m.extra["tool_calls"]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    if m.reasoning is not None:
        out["reasoning_content"] = m.reasoning
    if lossless:
        out.update((k, v) for k, v in m.extra.items() if k not in (_ABSENT, "role", "tool_calls"))
    return out


def _content_to_openai(content: str | tuple[ContentPart, ...] | None) -> Any:
    if content is None or isinstance(content, str):
        return content
    return [_part_to_openai(p) for p in content]


def _part_to_openai(p: ContentPart) -> dict[str, Any]:
    if isinstance(p, TextPart):
        return {"type": "text", "text": p.text, **p.extra}
    original = p.extra.get("openai_part")
    if isinstance(original, Mapping) and (isinstance(p, FilePart) or _image_url(original) == p.url):
        return dict(original)
    if isinstance(p, ImagePart):
        return {"type": "image_url", "image_url": {"url": p.url}}
    return {"type": "file", "file": {"file_data": p.url, "filename": p.name}}


def _image_url(part: Mapping[str, Any]) -> Any:
    image = part.get("image_url")
    return image.get("url") if isinstance(image, Mapping) else image


def _call_to_openai(c: ToolCall, lossless: bool) -> dict[str, Any]:
    function = {"name": c.name, "arguments": c.arguments}
    if lossless:
        return {"id": c.id, "function": function, **c.extra}
    return {"id": c.id, "type": "function", "function": function}
