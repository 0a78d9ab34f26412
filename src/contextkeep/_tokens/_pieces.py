"""Counting with a byte-level BPE `tokenizer.json` without its slow pre-tokenizer.

`tokenizers` spends about nine tenths of an encode splitting the text with its regex engine
(~2 MB/s here). When the pre-tokenizer is a sequence of isolating regex splits followed by a
byte-level mapping (DeepSeek's, among others), the same split is done here with `re` (see
`_onig`) and each piece's token count is remembered, so counting is a split plus dictionary
lookups; the BPE model only sees pieces it has not met before. Added tokens are taken out
first, as `tokenizers` does. Text with characters outside the verified ranges goes to
`tokenizers` itself. Tests compare both ways on every shared trajectory, on every verified
character and on generated text.
"""

from __future__ import annotations

import json
import operator
import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from contextkeep._tokens._onig import outside_verified, translate

__all__ = ["PieceCounter", "piece_counter"]

_MAX_PIECES = 200_000
"""Remembered piece (and part) counts before a memo starts over (a piece is a word-sized string)."""
_PART_CHARS = 64
"""The longest part whose count is remembered: a longer one is rarely met again, and one regex
call over it costs little per character."""


@lru_cache(maxsize=1)
def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet, as a `str.translate` table over a text's bytes read as Latin-1.

    Printable bytes map to themselves, the rest above 255.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


class PieceCounter:
    """Counts text the way one `tokenizers.Tokenizer` does, splitting it with `re` instead."""

    def __init__(
        self,
        splits: Sequence[str],
        tokenize: Callable[[str], Sequence[object]],
        added: tuple[Sequence[str], Sequence[str]],
        *,
        nfc: bool = False,
    ) -> None:
        *isolating, last = splits
        self._isolate = [
            (re.compile(f"({p})").split, re.compile(p).search, _context_free(p), _never_ascii(p))
            for p in isolating
        ]
        # The last split as one findall: the pattern, or else a run of characters where it cannot
        # start (what an isolating split leaves between two matches: rare, as its last resort).
        self._final = re.compile(f"(?:{last})|(?:(?!(?:{last}))[\\s\\S])+").findall
        self._tokenize = tokenize
        self._memo: dict[str, int] = {}
        """Tokens per piece (what the BPE model encodes)."""
        self._parts: dict[str, int] = {}
        """Tokens per short part (what the isolating splits leave), the sum of its pieces'."""
        raw, normalized = added
        self._raw = _AddedTokens(raw) if raw else None
        """Added tokens matched in the text as given."""
        self._normalized = _AddedTokens(normalized) if normalized else None
        """Added tokens matched in the normalized text."""
        self._nfc = nfc

    def count(self, text: str) -> int | None:
        """Tokens of `text`, or None when `tokenizers` must count it."""
        if outside_verified(text):
            return None
        # As `tokenizers` does: added tokens out of the raw text, then each segment normalized,
        # then the added tokens that match normalized text, then the split of what is left.
        segments: Sequence[str] = [text]
        added = 0
        if self._raw is not None:
            segments, added = self._raw.split(segments)
        if self._nfc:
            segments = [unicodedata.normalize("NFC", s) for s in segments]
            if any(map(outside_verified, segments)):
                return None  # composed into a character outside the verified blocks
        if self._normalized is not None:
            segments, found = self._normalized.split(segments)
            added += found
        # A split whose pattern looks at no context cannot match in a piece if not in the text.
        probe = "".join(segments)
        ascii = probe.isascii()
        splits = [
            split
            for split, search, context_free, never_ascii in self._isolate
            if not context_free or (not (ascii and never_ascii) and search(probe))
        ]
        return added + sum(self._count(s, splits) for s in segments)

    def _count(self, text: str, splits: Sequence[Callable[[str], list[str]]]) -> int:
        parts = [text]
        for split in splits:  # every split applies to every piece of the previous one
            parts = [x for part in parts for x in split(part) if x]
        # Text between isolated digits is short and recurs (code, logs, tables): each such part
        # is split once and then known by its count, a lookup instead of a regex call.
        known = self._parts
        try:
            return sum(map(known.__getitem__, parts))  # every part seen before: the common case
        except KeyError:
            pass
        total = 0
        for part in parts:
            n = known.get(part)
            if n is None:
                n = self._pieces(self._final(part))
                if len(part) <= _PART_CHARS:
                    if len(known) > _MAX_PIECES:
                        known.clear()
                    known[part] = n
            total += n
        return total

    def _pieces(self, pieces: Sequence[str]) -> int:
        memo = self._memo
        try:
            return sum(map(memo.__getitem__, pieces))  # every piece seen before: the common case
        except KeyError:
            pass
        if len(memo) > _MAX_PIECES:
            memo.clear()
        table = _byte_chars()
        total = 0
        for piece in pieces:
            n = memo.get(piece)
            if n is None:
                n = memo[piece] = len(self._tokenize(piece.encode().decode("latin-1").translate(table)))
            total += n
        return total


class _AddedTokens:
    """One kind of added tokens, matched leftmost-longest (a token counts one, whatever its text)."""

    def __init__(self, contents: Sequence[str]) -> None:
        # Found by a short prefix first (rarely present in text), then longest first.
        self._width = width = min(3, *map(len, contents))
        self._by_prefix: dict[str, list[str]] = {}
        for content in sorted(set(contents), key=len, reverse=True):
            self._by_prefix.setdefault(content[:width], []).append(content)
        # Where a token may begin: one character class, scanned at C speed (an alternation of the
        # prefixes is tried at every position, ~20 ns a character). In ASCII text only the ASCII
        # ones can: often a single character, searched as a literal (three times faster than a class).
        firsts = sorted({p[0] for p in self._by_prefix})
        self._starts = _one_of(firsts)
        ascii = [c for c in firsts if c.isascii()]
        self._ascii_starts = _one_of(ascii) if ascii else None

    def split(self, segments: Sequence[str]) -> tuple[Sequence[str], int]:
        """The text around every added token, and how many there were (`segments` itself if none)."""
        out: list[str] = []
        found = 0
        for text in segments:
            starts = self._ascii_starts if text.isascii() else self._starts
            end = 0
            for start in map(_start, starts.finditer(text) if starts is not None else ()):
                if start < end:  # inside the token just found
                    continue
                candidates = self._by_prefix.get(text[start : start + self._width], ())
                token = next((c for c in candidates if text.startswith(c, start)), None)
                if token is not None:
                    out.append(text[end:start])
                    found += 1
                    end = start + len(token)
            out.append(text[end:])
        return ([s for s in out if s], found) if found else (segments, 0)


_start = operator.methodcaller("start")


def _one_of(chars: Sequence[str]) -> re.Pattern[str]:
    """A pattern matching any one of `chars` (one character compiles to a literal)."""
    return re.compile("[" + "".join(map(re.escape, chars)) + "]")


_ONE_CLASS = re.compile(r"(\[(?:\\.|[^\\\]])+\])(?:[+*?]|\{\d+(?:,\d*)?\})?")
"""A pattern that is one character class, repeated or not: each match is made of its characters only."""


def _never_ascii(pattern: str) -> bool:
    """Whether `pattern` cannot match in ASCII text: one character class holding no ASCII character."""
    shape = _ONE_CLASS.fullmatch(pattern)
    if shape is None:
        return False
    one = re.compile(shape.group(1))
    return not any(one.fullmatch(chr(c)) for c in range(128))


def _context_free(pattern: str) -> bool:
    """Whether `pattern` has no lookaround, anchor or word boundary (a match depends on itself only)."""
    return not re.search(r"\(\?<?[=!]|\\[bBAzZG]|\$|(?<!\[)\^", pattern)


def piece_counter(tokenizer: Any) -> PieceCounter | None:
    """A :class:`PieceCounter` for a `tokenizers.Tokenizer`, or None if its pipeline is not one it follows.

    It follows: no normalizer or NFC, a pre-tokenizer that is a sequence of isolating `Split` regexes
    ending in a `ByteLevel` step with no prefix space and no regex of its own, a plain BPE
    model, and added tokens without strip or single-word rules.
    """
    config = json.loads(tokenizer.to_str())
    normalizer = config.get("normalizer") or {"type": "Sequence", "normalizers": []}
    norms = normalizer.get("normalizers", []) if normalizer.get("type") == "Sequence" else [normalizer]
    if any(n.get("type") != "NFC" for n in norms):
        return None
    pre = config.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    last = steps[-1] if len(steps) >= 2 else {}
    if last.get("type") != "ByteLevel" or last.get("add_prefix_space") or last.get("use_regex", True):
        return None
    splits: list[str] = []
    for step in steps[:-1]:
        pattern = step.get("pattern", {})
        if step.get("type") != "Split" or step.get("behavior") != "Isolated" or step.get("invert"):
            return None
        source = translate(pattern["Regex"]) if "Regex" in pattern else re.escape(pattern.get("String", ""))
        # Groups would change what split and findall return; an empty match splits differently.
        if not source or (compiled := re.compile(source)).groups or compiled.match(""):
            return None
        splits.append(source)
    model = config.get("model", {})
    if model.get("type") != "BPE" or any(
        model.get(k) for k in ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback")
    ):
        return None
    added = [t for t in config.get("added_tokens", []) if t.get("content")]
    if any(t.get("lstrip") or t.get("rstrip") or t.get("single_word") for t in added):
        return None
    raw, normalized = ([t["content"] for t in added if bool(t.get("normalized")) is n] for n in (False, True))
    return PieceCounter(splits, tokenizer.model.tokenize, (raw, normalized), nfc=bool(norms))
