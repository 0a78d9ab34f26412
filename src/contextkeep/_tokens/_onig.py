r"""Oniguruma split patterns (as in `tokenizer.json`) rewritten for Python's `re`.

`re` has no Unicode property classes, so `\p{L}`, `\s` and friends become explicit
character ranges. They are built only over blocks whose characters have been assigned, with
the same categories, for many Unicode versions: there `tokenizers`' engine and ours cannot
disagree, whichever Unicode version each was built with. Text with any other character is not
split with these patterns (:func:`outside_verified`).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = ["VERIFIED_RANGES", "outside_verified", "translate"]

VERIFIED_RANGES = (
    # Latin to Samaritan/Mandaic, general punctuation to miscellaneous technical, box drawing
    # to dingbats, CJK punctuation and kana, the CJK ideographs of Unicode 1.1, full-width forms.
    (0x0000, 0x085F),
    (0x2000, 0x23FF),
    (0x2500, 0x27BF),
    (0x3000, 0x30FF),
    (0x4E00, 0x9FA5),
    (0xFF00, 0xFFEF),
)
"""The code point ranges (inclusive) text must stay within to be split here."""

_OUTSIDE = re.compile("[^" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in VERIFIED_RANGES) + "]")

_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
"""Unicode's White_Space property within the verified ranges (Oniguruma's `\\s`)."""

_ESCAPES = set("rntfv") | set(r"\^$.|?*+()[]{}-/!\"#%&',:;<=>@_`~ ")
"""Escapes that mean the same in both engines (control letters, escaped punctuation)."""


def outside_verified(text: str) -> bool:
    """Whether `text` holds a character outside :data:`VERIFIED_RANGES`."""
    return not text.isascii() and _OUTSIDE.search(text) is not None


@lru_cache(maxsize=64)
def _category_ranges(category: str) -> str:
    """`re` class body of the verified characters whose general category starts with `category`."""
    body: list[str] = []
    for lo, hi in VERIFIED_RANGES:
        start = None
        for cp in range(lo, hi + 2):
            inside = cp <= hi and unicodedata.category(chr(cp)).startswith(category)
            if inside and start is None:
                start = cp
            elif not inside and start is not None:
                body.append(_range(start, cp - 1))
                start = None
    return "".join(body)


def _range(lo: int, hi: int) -> str:
    return re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"


_PROPERTY = re.compile(r"\\([pP])\{(L[ultmo]?|N[dlo]?|M[nce]?|P[cdseifo]?|S[mcko]?|Z[slp]?)\}")


def translate(pattern: str) -> str | None:
    """`pattern` for `re` (exact within the verified ranges), or None if it uses anything else."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            escape = _escape(pattern, i, in_class)
            if escape is None:
                return None
            text, i = escape
            out.append(text)
            continue
        if (
            c == "("
            and not in_class
            and pattern[i + 1 : i + 2] == "?"
            and pattern[i + 2 : i + 3] not in tuple(":=!<>")
        ):
            return None  # inline flags: case folding differs between the engines
        if c == "[" and not in_class:
            in_class = True
            text, i = _class_opening(pattern, i)
            out.append(text)
        elif c == "[":
            return None  # nested classes and set operations
        elif c == "]" and in_class:
            in_class = False
            out.append(c)
        else:
            out.append(re.escape(c) if in_class and c in "&~|" else c)
        i += 1
    if in_class:
        return None
    try:
        re.compile("".join(out))
    except re.error:
        return None
    return "".join(out)


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int] | None:
    """The `re` form of the escape at `pattern[i]` and the index after it; None if untranslatable."""
    prop = _PROPERTY.match(pattern, i)
    if prop is not None:
        negated, body = prop.group(1) == "P", _category_ranges(prop.group(2))
        if in_class and negated:
            return None  # a negated property inside a class has no range form
        return (body if in_class else f"[{'^' if negated else ''}{body}]"), prop.end()
    nxt = pattern[i + 1 : i + 2]
    if nxt in ("s", "S"):
        if in_class and nxt == "S":
            return None
        return (_WHITE_SPACE if in_class else f"[{'^' if nxt == 'S' else ''}{_WHITE_SPACE}]"), i + 2
    if nxt and nxt in _ESCAPES:
        return pattern[i : i + 2], i + 2
    return None  # \d, \w, \b, \h, \x.., script classes...: not translated


def _class_opening(pattern: str, i: int) -> tuple[str, int]:
    """The class opening at `pattern[i]` (`[`, `[^`, with a literal leading `]`); the index it ends at."""
    text = "["
    if pattern[i + 1 : i + 2] == "^":
        text += "^"
        i += 1
    if pattern[i + 1 : i + 2] == "]":  # a leading ']' is literal
        text += r"\]"
        i += 1
    return text, i
