"""What input must be before anything is stored: bounded ids, valid Unicode, bounded nesting.

Checked when messages are added (and conversation ids when a session opens), so bad input
raises a typed error naming what is wrong before any of it reaches the store or the workspace:
a 10,000-character call id would otherwise fail at offload (`ENAMETOOLONG`), a lone surrogate
in the store's encoder, a 5,000-deep object in the serialiser (`RecursionError`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any, NoReturn

import orjson

from contextkeep._errors import InvalidIdError, MessageFormatError
from contextkeep._messages import Message, TextPart

__all__ = [
    "MAX_CONVERSATION_ID_CHARS",
    "MAX_ID_CHARS",
    "MAX_NESTING",
    "check_conversation_id",
    "check_message",
    "checked",
    "data_url_bytes",
]

MAX_ID_CHARS = 100
"""Longest message or tool-call id: both may name one offload file (`tool_result-{call}.{id}.txt`),
which has to stay under the file systems' 255-byte name limit. Providers' ids are 9 to 40."""
MAX_CONVERSATION_ID_CHARS = 200
"""Longest conversation id: it names the conversation's workspace folder (a fork adds 18)."""
MAX_NESTING = 64
"""Deepest nesting of provider fields kept verbatim and of tool-call arguments (JSON levels)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")
_FORMAT = "message"
_LEAVES = frozenset({type(None), bool, int, float})
"""Leaf types with nothing to check (most of a response's fields)."""


def check_conversation_id(conversation_id: str) -> None:
    """Raise `InvalidIdError` unless `conversation_id` can name a conversation."""
    _check_id(conversation_id, "conversation_id", MAX_CONVERSATION_ID_CHARS, None, allow_empty=False)


def checked(messages: list[Message]) -> list[Message]:
    """`messages`, each checked by :func:`check_message` (the error names its position)."""
    for i, m in enumerate(messages):
        check_message(m, i)
    return messages


def check_message(m: Message, index: int | None = None) -> None:
    """Raise a typed error naming the field if `m` cannot be stored as it is.

    `InvalidIdError` for an over-long id or one with control characters, `MessageFormatError`
    for text that is not valid Unicode (a lone surrogate) or nesting deeper than `MAX_NESTING`.
    """
    for what, given in (("id", m.id), ("tool_call_id", m.tool_call_id)):
        if given is not None:
            _check_id(given, what, MAX_ID_CHARS, index)
    texts: list[tuple[str, str | None]] = [("name", m.name), ("reasoning_content", m.reasoning)]
    nested: list[tuple[str, Mapping[str, Any]]] = [("provider fields", m.extra), ("metadata", m.metadata)]
    for call in m.tool_calls:
        _check_id(call.id, "tool_calls.id", MAX_ID_CHARS, index)
        if _json_depth(call.arguments) > MAX_NESTING:
            raise MessageFormatError(
                _FORMAT,
                f"tool call {call.id!r}: arguments nest deeper than {MAX_NESTING} levels",
                index=index,
            )
        texts += [("tool_calls.function.name", call.name), ("tool_calls.function.arguments", call.arguments)]
        nested.append(("tool call fields", call.extra))
    if isinstance(m.content, str):
        texts.append(("content", m.content))
    elif m.content is not None:
        for part in m.content:
            texts.append(
                ("content.text", part.text) if isinstance(part, TextPart) else ("content.url", part.url)
            )
            nested.append(("content part fields", part.extra))
    for what, text in texts:
        if text is not None and not _encodes(text):
            _not_unicode(what, text, index)
    for what, fields in nested:
        if fields:
            _check_nested(fields, what, index, 1)


def data_url_bytes(url: str) -> tuple[str, bytes]:
    """The media type and bytes of a base64 `data:` URL; `MessageFormatError` if it does not decode."""
    head, data = url[5:].split(";base64,", 1)
    try:
        return head, base64.b64decode(data)
    except ValueError as exc:  # binascii.Error, or characters outside ASCII
        raise MessageFormatError(
            _FORMAT, f"data URL ({head or 'no media type'}): invalid base64: {exc}"
        ) from None


def _check_id(value: str, what: str, limit: int, index: int | None, *, allow_empty: bool = True) -> None:
    problem = None
    if not isinstance(value, str):
        problem = f"must be a string, got {type(value).__name__}"
    elif not value and not allow_empty:
        problem = "must not be empty"
    elif len(value) > limit:
        problem = f"is {len(value)} characters long, more than {limit}"
    elif _CONTROL.search(value):
        problem = "contains a NUL or another control character"
    elif not _encodes(value):
        problem = "is not valid Unicode (a lone surrogate)"
    if problem is not None:
        raise InvalidIdError(what, problem, value=value if isinstance(value, str) else "", index=index)


def _not_unicode(what: str, text: str, index: int | None) -> NoReturn:
    position = next((i for i, ch in enumerate(text) if "\ud800" <= ch <= "\udfff"), 0)
    raise MessageFormatError(
        _FORMAT,
        f"{what} is not valid Unicode: a lone surrogate (U+{ord(text[position]):04X}) at character "
        f"{position}; decode the source with errors='replace'",
        index=index,
    )


def _encodes(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_nested(
    value: Mapping[str, Any] | list[Any] | tuple[Any, ...], what: str, index: int | None, depth: int
) -> None:
    """Too deep (bounded by `MAX_NESTING`), or a string that is not valid Unicode, raises.

    Provider fields (a whole response kept verbatim) hold hundreds of leaves and this runs for
    every message added, so what orjson encodes in few enough brackets passes at C speed; the
    rest is walked with a stack, which also names what is wrong.
    """
    if _plainly_valid(value, MAX_NESTING - depth + 1):
        return
    pending: list[tuple[Any, int]] = [(value, depth)]
    while pending:
        node, level = pending.pop()
        if level > MAX_NESTING:
            raise MessageFormatError(_FORMAT, f"{what} nest deeper than {MAX_NESTING} levels", index=index)
        if type(node) is dict or isinstance(node, Mapping):
            for key in node:
                if isinstance(key, str) and not key.isascii() and not _encodes(key):
                    _not_unicode(what, key, index)
            node = node.values()
        for child in node:
            kind = type(child)
            if kind in _LEAVES:
                continue
            if kind is str or isinstance(child, str):
                if not child.isascii() and not _encodes(child):  # isascii first: the loop is the cost
                    _not_unicode(what, child, index)
            elif kind is dict or kind is list or kind is tuple or isinstance(child, dict | list | tuple):
                pending.append((child, level + 1))


def _plainly_valid(value: object, levels: int) -> bool:
    """Whether orjson encodes `value` with at most `levels` brackets opened.

    orjson refuses lone surrogates, so every string in it is valid Unicode, and no more
    containers than brackets can nest. Anything it refuses (keys that are not strings, numbers
    beyond 64 bits, other types) or more brackets (some may be inside strings) is walked instead.
    """
    try:
        encoded = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        return False
    return encoded.count(b"{") + encoded.count(b"[") <= levels


def _json_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest (brackets inside strings ignored)."""
    if text.count("[") + text.count("{") <= MAX_NESTING:  # the common case, at C speed
        return 0
    depth = deepest = 0
    for bracket in _BRACKET.findall(_JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest
