"""The provider-neutral message model.

A :class:`Message` is immutable. Its :attr:`Message.key` is a content hash that
token counts are cached under, so a message is counted once however often it is
sent. Provider fields contextkeep does not interpret are kept verbatim in
:attr:`Message.extra`, so a message converts back to its source format
losslessly.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias

import orjson

__all__ = [
    "ContentPart",
    "FilePart",
    "ImagePart",
    "Message",
    "Role",
    "TextPart",
    "ToolCall",
    "message_from_dict",
    "message_json",
    "message_to_dict",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
"""Who wrote a message."""


@dataclass(frozen=True, slots=True)
class TextPart:
    """A piece of text inside a multimodal message."""

    text: str
    """The text."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Provider fields kept verbatim (e.g. `cache_control`)."""


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image, by URL or inline data."""

    url: str
    """An `http(s)://` URL, or a `data:` URL holding the bytes."""
    media_type: str | None = None
    """MIME type when known (e.g. `image/png`)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Provider fields kept verbatim (e.g. OpenAI `detail`)."""


@dataclass(frozen=True, slots=True)
class FilePart:
    """A file (audio, PDF, ...) by URL or inline data."""

    url: str
    """An `http(s)://` URL, or a `data:` URL holding the bytes."""
    media_type: str | None = None
    """MIME type when known."""
    name: str | None = None
    """File name when known."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Provider fields kept verbatim."""


ContentPart: TypeAlias = TextPart | ImagePart | FilePart


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call requested by an assistant message."""

    id: str
    """The call id that the matching tool result names."""
    name: str
    """The function name."""
    arguments: str
    """The arguments exactly as the model produced them (usually a JSON object)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Provider fields kept verbatim (e.g. `index`)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a conversation, independent of any provider format."""

    role: Role
    """Who speaks: `system`, `user`, `assistant` or `tool` (a tool result)."""
    content: str | tuple[ContentPart, ...] | None = None
    """Plain text, a tuple of parts (multimodal), or `None` (an assistant that only calls tools)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Function calls an assistant message makes."""
    tool_call_id: str | None = None
    """For a tool result: the id of the call it answers."""
    name: str | None = None
    """Optional speaker or tool name."""
    reasoning: str | None = None
    """Reasoning text a thinking model returned (e.g. DeepSeek `reasoning_content`)."""
    id: str | None = None
    """Stable id; the transcript assigns one when the message is appended."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """contextkeep's own annotations (e.g. `ck_kind` for summaries and markers); never sent."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Provider fields kept verbatim for lossless conversion back; never sent in a view."""
    key: str = field(init=False, repr=False, compare=False)
    """Content hash (role, content, calls, call id, name, reasoning): the token-count cache key."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", _content_key(self))

    @property
    def text(self) -> str:
        """All text of the message: the string content or its text parts joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def media(self) -> tuple[ImagePart | FilePart, ...]:
        """Images and files in the content."""
        if self.content is None or isinstance(self.content, str):
            return ()
        return tuple(p for p in self.content if not isinstance(p, TextPart))

    def with_text(self, text: str) -> Message:
        """A copy whose content is replaced by `text` (ids, calls and metadata kept)."""
        return replace(self, content=text)

    def with_metadata(self, **items: Any) -> Message:
        """A copy with `items` merged into metadata."""
        return _unhashed_copy(self, "metadata", {**self.metadata, **items})

    def with_id(self, id: str | None) -> Message:
        """A copy with another `id`."""
        return _unhashed_copy(self, "id", id)


_SLOTS = tuple(f for f in Message.__slots__ if f != "__weakref__")
_FIELDS = operator.attrgetter(*_SLOTS)
_SETTERS = tuple(getattr(Message, slot).__set__ for slot in _SLOTS)
"""The slots' own setters: they bypass the frozen `__setattr__`, as `object.__setattr__` would."""


def _unhashed_copy(m: Message, name: str, value: Any) -> Message:
    """`m` with one field the key does not cover changed, its key kept (hashing costs 5-20 µs)."""
    copy = object.__new__(Message)
    for set_slot, current in zip(_SETTERS, _FIELDS(m), strict=True):
        set_slot(copy, current)
    object.__setattr__(copy, name, value)
    return copy


def _part_payload(part: ContentPart) -> list[Any]:
    if isinstance(part, TextPart):
        return ["t", part.text]
    if isinstance(part, ImagePart):
        return ["i", part.url, part.media_type]
    return ["f", part.url, part.media_type, part.name]


def _content_key(m: Message) -> str:
    content: Any = (
        m.content
        if m.content is None or isinstance(m.content, str)
        else [_part_payload(p) for p in m.content]
    )
    payload = [
        m.role,
        content,
        [[c.id, c.name, c.arguments] for c in m.tool_calls],
        m.tool_call_id,
        m.name,
        m.reasoning,
    ]
    # A lone surrogate still hashes (adding such a message raises `MessageFormatError`, see `_validation`).
    raw = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def message_to_dict(m: Message) -> dict[str, Any]:
    """A JSON-ready form that :func:`message_from_dict` restores exactly (stores, offload files)."""
    out: dict[str, Any] = {"role": m.role}
    if m.content is not None:
        out["content"] = m.content if isinstance(m.content, str) else [_part_to_dict(p) for p in m.content]
    if m.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "name": c.name,
                "arguments": c.arguments,
                **({"extra": dict(c.extra)} if c.extra else {}),
            }
            for c in m.tool_calls
        ]
    for name in ("tool_call_id", "name", "reasoning", "id"):
        value = getattr(m, name)
        if value is not None:
            out[name] = value
    if m.metadata:
        out["metadata"] = dict(m.metadata)
    if m.extra:
        out["extra"] = dict(m.extra)
    return out


def message_json(m: Message) -> str:
    """`message_to_dict` as compact JSON (one line), UTF-8 text unescaped.

    Not kept on the message: a history in RAM would hold every message twice (a store that
    persists JSON serialises each message once, when it is appended). Encoded by orjson (an
    offload of a pass's dropped rounds is hundreds of KB: about eight times faster); what orjson
    refuses (integers beyond 64 bits, keys that are not strings, a lone surrogate) by `json`.
    """
    data = message_to_dict(m)
    try:
        return orjson.dumps(data).decode()
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def message_from_dict(d: Mapping[str, Any]) -> Message:
    """Inverse of :func:`message_to_dict`."""
    content = d.get("content")
    return Message(
        role=d["role"],
        content=content
        if content is None or isinstance(content, str)
        else tuple(_part_from_dict(p) for p in content),
        tool_calls=tuple(
            ToolCall(c["id"], c["name"], c["arguments"], c.get("extra", {})) for c in d.get("tool_calls", ())
        ),
        tool_call_id=d.get("tool_call_id"),
        name=d.get("name"),
        reasoning=d.get("reasoning"),
        id=d.get("id"),
        metadata=d.get("metadata", {}),
        extra=d.get("extra", {}),
    )


def _part_to_dict(p: ContentPart) -> dict[str, Any]:
    extra = {"extra": dict(p.extra)} if p.extra else {}
    if isinstance(p, TextPart):
        return {"type": "text", "text": p.text, **extra}
    if isinstance(p, ImagePart):
        return {"type": "image", "url": p.url, "media_type": p.media_type, **extra}
    return {"type": "file", "url": p.url, "media_type": p.media_type, "name": p.name, **extra}


def _part_from_dict(d: Mapping[str, Any]) -> ContentPart:
    extra = d.get("extra", {})
    if d["type"] == "text":
        return TextPart(d["text"], extra)
    if d["type"] == "image":
        return ImagePart(d["url"], d.get("media_type"), extra)
    return FilePart(d["url"], d.get("media_type"), d.get("name"), extra)
