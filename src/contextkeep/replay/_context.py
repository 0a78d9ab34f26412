"""Whole-token and in-context presence of a term, on text normalised for JSON escapes and whitespace.

A term is *whole* in a text when it occurs there not glued to a word character on
either side. It is *in context* when the view also holds, around one whole occurrence,
at least :data:`CONTEXT_CHARS` characters (split in any way between the left and the
right side) of the text that surrounded the term at one of its earlier occurrences in
the transcript. A message listing bare names passes the whole-token test but not the
context test; a verbatim copy of the earlier text passes both.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["CONTEXT_CHARS", "ContextIndex", "normalise", "presence", "whole_pattern", "windows"]

CONTEXT_CHARS = 16
"""Characters of the earlier surroundings the view must hold next to the term."""

_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|([\"\\/bfnrt]))")
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": " ", "f": " ", "n": "\n", "r": "\n", "t": "\t"}
_SPACE = re.compile(r"\s+")


def _unescape(match: re.Match[str]) -> str:
    code, simple = match.groups()
    return chr(int(code, 16)) if code else _SIMPLE[simple]


def normalise(text: str) -> str:
    """`text` with JSON string escapes decoded and every whitespace run made one space."""
    return _SPACE.sub(" ", _ESCAPE.sub(_unescape, text))


def whole_pattern(term: str) -> re.Pattern[str]:
    """Occurrences of `term` not preceded or followed by a word character."""
    return re.compile(rf"(?<!\w){re.escape(term)}(?!\w)")


def windows(text: str, start: int, end: int) -> set[str]:
    """Every string of the term at `text[start:end]` with exactly `CONTEXT_CHARS` context characters."""
    out = set()
    for left in range(CONTEXT_CHARS + 1):
        right = CONTEXT_CHARS - left
        if start - left >= 0 and end + right <= len(text):
            out.add(text[start - left : end + right])
    return out


class ContextIndex:
    """The context windows of each term's whole occurrences in a transcript, up to a message.

    `texts` are the transcript's messages (already normalised); queries must come with
    non-decreasing message indexes, as the calls of a replay do.
    """

    def __init__(self, texts: Sequence[str]) -> None:
        self._starts: list[int] = []
        position = 0
        for t in texts:
            self._starts.append(position)
            position += len(t) + 1
        self._text = "\x00".join(texts)
        self._occurrences: dict[str, list[tuple[int, int]]] = {}
        self._seen: dict[str, tuple[int, set[str]]] = {}

    def before(self, term: str, index: int) -> set[str]:
        """Context windows of `term`'s whole occurrences in messages before `index`."""
        occurrences = self._occurrences.get(term)
        if occurrences is None:
            found = whole_pattern(term).finditer(self._text)
            occurrences = self._occurrences[term] = [m.span() for m in found]
        limit = self._starts[index] if index < len(self._starts) else len(self._text) + 1
        upto = bisect_left(occurrences, (limit, 0))
        done, seen = self._seen.get(term, (0, set()))
        for start, end in occurrences[done:upto]:
            seen |= windows(self._text, start, end)
        self._seen[term] = (max(done, upto), seen)
        return seen


def presence(term: str, view_text: str, earlier: set[str]) -> tuple[bool, bool]:
    """(`term` is whole in `view_text`, and in context of one of the `earlier` windows)."""
    whole = in_context = False
    for match in whole_pattern(term).finditer(view_text):
        whole = True
        if not earlier.isdisjoint(windows(view_text, *match.span())):
            in_context = True
            break
    return whole, in_context
