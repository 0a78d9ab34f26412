"""Where a request body's `messages` array lies, so a re-sent history is compared as bytes.

A client re-sends its whole history as the same bytes. Once the proxy knows where the
previous body's messages lie, one `startswith` (a memcmp) proves the new body repeats
them: parsing is determined by the bytes read, so the same bytes up to the end of the
last previous message are the same messages. Only what follows is scanned for the
array's end. Scanning a whole body (a string or bracket at a time, strings matched in C)
is left for when the byte comparison fails: the first request and after a branch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["Span", "extended_span", "find_span", "find_start", "objects", "without_repeated"]

_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{}:]')
"""What nesting depends on: strings (escapes included), brackets, and the colon after a key."""
_KEY = b'"messages"'
_WHITESPACE = b" \t\r\n"
"""JSON's whitespace (`bytes.strip()` would take more)."""


class Span(NamedTuple):
    """The `messages` array of one body."""

    start: int
    """Offset just after its `[`."""
    end: int
    """Offset just after its last element (`start` when empty)."""
    size: int
    """Its elements (all objects)."""


class _NotMessages(ValueError):
    """The array holds something other than objects, or does not end."""


def objects(body: bytes, pos: int) -> Iterator[tuple[int, int]]:
    """From `pos` inside the array, between elements: each object's (start, end) until the `]`.

    Reads only as far as the caller iterates; raises `ValueError` where the array holds
    something other than objects or has no end.
    """
    depth, start = 0, pos
    for m in _TOKEN.finditer(body, pos):
        token = m.group()
        if token in (b"{", b"["):
            if depth == 0:
                if token != b"{":
                    raise _NotMessages  # not a message: left to the parser's verdict
                start = m.start()
            depth += 1
        elif token in (b"}", b"]"):
            depth -= 1
            if depth < 0:
                return
            if depth == 0:
                yield start, m.end()
        elif depth == 0:
            raise _NotMessages  # a bare string element
    raise _NotMessages


def _elements(body: bytes, pos: int) -> tuple[int, int] | None:
    """From `pos` inside the array, between elements: (end of the last element, objects passed)."""
    try:
        found = list(objects(body, pos))
    except _NotMessages:
        return None
    return (found[-1][1] if found else pos), len(found)


def find_span(body: bytes) -> Span | None:
    """The span of the top-level `messages` array, scanning `body` from its start."""
    start = find_start(body)
    found = _elements(body, start) if start is not None else None
    return (
        Span(start, *found) if start is not None and found is not None and _single(body, found[0]) else None
    )


def extended_span(body: bytes, last_body: bytes, last: Span) -> Span | None:
    """The span of `body` if its messages start with all of `last_body`'s (at `last`), else `None`."""
    start = find_start(body)
    if start is None or not body.startswith(memoryview(last_body)[last.start : last.end], start):
        return None
    end = start + last.end - last.start
    found = _elements(body, end)
    if found is None:
        return None
    new_end, new = found
    end = new_end if new else end
    return Span(start, end, last.size + new) if _single(body, end) else None


def without_repeated(body: bytes, span: Span, last: Span) -> bytes | None:
    """`body` (at `span`) with the messages it repeats from the last body (at `last`) cut out.

    What remains is the same document with only the new messages in its array, so it parses
    in time proportional to what is new. `None` unless only a comma (and whitespace) lies
    between the repeated messages and the first new one.
    """
    repeated = span.start + last.end - last.start
    comma = body.find(b",", repeated, span.end)
    if comma < 0 or body[repeated:comma].strip(_WHITESPACE):
        return None
    view = memoryview(body)
    return b"".join((view[: span.start], view[comma + 1 :]))


def _single(body: bytes, end: int) -> bool:
    """No second `messages` key after the array (a parser takes the last; a false alarm costs only speed)."""
    return body.find(_KEY, end) < 0


def find_start(body: bytes) -> int | None:
    """Offset just after the `[` of the top-level `messages` array (reads only what precedes it)."""
    depth, key = 0, False
    for m in _TOKEN.finditer(body):
        token = m.group()
        if token in (b"{", b"["):
            if key and depth == 1 and token == b"[":
                return m.end()
            depth += 1
        elif token in (b"}", b"]"):
            depth -= 1
        elif token != b":":
            key = depth == 1 and token == _KEY
            continue
        key = key and token == b":"
    return None
