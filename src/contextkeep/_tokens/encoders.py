"""Text encoders: the part of a token counter that turns text into a number.

- :class:`TiktokenEncoder`: OpenAI's BPE encodings (`o200k_base`, `cl100k_base`).
- :class:`HFEncoder`: any Hugging Face `tokenizer.json` (DeepSeek, Qwen, Llama, ...).
- :class:`HeuristicEncoder`: characters / 4, optionally counting CJK characters one each.
- :class:`PieceEncoder`: an estimate from the pieces a tokenizer's pre-split would make.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Protocol, runtime_checkable

from contextkeep._errors import TokenizerError
from contextkeep._tokens._pieces import piece_counter

__all__ = [
    "Encoder",
    "HFEncoder",
    "HeuristicEncoder",
    "PieceEncoder",
    "TiktokenEncoder",
    "encoding_for_model",
]


@runtime_checkable
class Encoder(Protocol):
    """Counts the tokens of a piece of text."""

    @property
    def name(self) -> str:
        """Stable identifier, part of every cache key (e.g. `tiktoken:o200k_base`)."""
        ...

    @property
    def exact(self) -> bool:
        """True for a real tokenizer, False for an estimate."""
        ...

    def count(self, text: str) -> int:
        """Tokens in `text`.

        Special-token strings follow the provider's rule: OpenAI encodes them in content as plain
        text (so does :class:`TiktokenEncoder`; its framings add the real ones as constants), while
        a `tokenizer.json` chat template renders them as the added tokens they are.
        """
        ...


_SHORT_CHARS = 256
_MAX_SHORT = 1 << 15


class _ShortTexts:
    """Counts of short texts (up to `_SHORT_CHARS`: a line), remembered whole.

    Compaction counts the same lines on every pass (the digest's candidates, the lines a preview
    keeps); a tokenizer encodes each once. Past `_MAX_SHORT` texts the memo starts over.
    """

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def count(self, text: str, count: Callable[[str], int]) -> int:
        if len(text) > _SHORT_CHARS:
            return count(text)
        counts = self._counts
        n = counts.get(text)
        if n is None:
            if len(counts) >= _MAX_SHORT:
                counts.clear()
            n = counts[text] = count(text)
        return n


# Families on o200k_base; everything else OpenAI-made that we know of uses cl100k_base.
_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")


def encoding_for_model(model: str) -> str:
    """The tiktoken encoding name for an OpenAI model family."""
    bare = model.rsplit("/", 1)[-1].lower()
    return "o200k_base" if bare.startswith(_O200K_PREFIXES) else "cl100k_base"


@lru_cache(maxsize=8)
def _tiktoken_encoding(name: str) -> object:
    import tiktoken  # lazy: loading encodings is slow and not every counter needs them

    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:
        hint = os.environ.get("TIKTOKEN_CACHE_DIR", "(unset)")
        raise TokenizerError(
            f"cannot load tiktoken encoding {name!r} (no network? TIKTOKEN_CACHE_DIR={hint}): {exc}"
        ) from exc


class TiktokenEncoder:
    """An OpenAI BPE encoding through tiktoken."""

    exact = True

    def __init__(self, encoding: str = "o200k_base") -> None:
        self._enc = _tiktoken_encoding(encoding)
        self.name = f"tiktoken:{encoding}"
        self._short = _ShortTexts()

    @classmethod
    def for_model(cls, model: str) -> TiktokenEncoder:
        """The encoding an OpenAI model family uses."""
        return cls(encoding_for_model(model))

    def count(self, text: str) -> int:
        """Tokens in `text`, special tokens read as ordinary text."""
        return self._short.count(text, self._encode)

    def _encode(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text))  # type: ignore[attr-defined]


class HFEncoder:
    """A Hugging Face `tokenizers` tokenizer loaded from a `tokenizer.json` file."""

    exact = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(os.fspath(path))
        except Exception as exc:
            raise TokenizerError(f"cannot load tokenizer.json from {os.fspath(path)!r}: {exc}") from exc
        self.name = f"hf:{os.path.basename(os.fspath(path))}"
        self._pieces = piece_counter(self._tok)
        self._short = _ShortTexts()

    @property
    def splits_natively(self) -> bool:
        """Whether text is split here rather than by `tokenizers` (same counts, about 3x faster)."""
        return self._pieces is not None

    def count(self, text: str) -> int:
        """Tokens in `text`: the native pre-tokenizer when it can follow the pipeline, else `tokenizers`."""
        return self._short.count(text, self._encode)

    def _encode(self, text: str) -> int:
        if self._pieces is not None:
            n = self._pieces.count(text)
            if n is not None:
                return n
        return len(self._tok.encode(text, add_special_tokens=False).ids)


# Kana, CJK ideographs (and extension A, compatibility), hangul, full-width forms: about a token each.
_CJK_CLASS = "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
_CJK = re.compile(_CJK_CLASS)


class HeuristicEncoder:
    """An estimate: one token per `chars_per_token` characters, CJK characters one token each."""

    exact = False

    def __init__(self, chars_per_token: float = 4.0, *, cjk_aware: bool = True) -> None:
        self.chars_per_token = chars_per_token
        self.cjk_aware = cjk_aware
        self.name = f"heuristic:{chars_per_token:g}{':cjk' if cjk_aware else ''}"

    def count(self, text: str) -> int:
        """An estimate of the tokens in `text` from its characters (ASCII and others weighed apart)."""
        if not text:
            return 0
        # ASCII fast path: most agent traffic is code and logs.
        cjk = len(_CJK.findall(text)) if self.cjk_aware and not text.isascii() else 0
        return cjk + math.ceil((len(text) - cjk) / self.chars_per_token)


# One match per piece a BPE pre-tokenizer (GPT-4's, DeepSeek's) would make: a CJK character; up to
# 6 letters with the space before them; up to 3 digits; up to 2 punctuation marks; a run of
# whitespace (its last space goes with the word after it).
_PIECE = re.compile(_CJK_CLASS + r"| ?[^\W\d_]{1,6}| ?\d{1,3}| ?(?:[^\w\s]|_){1,2}|\s+(?!\S)|\s+")

_TOKENS_PER_PIECE = 0.86
"""Merges make fewer tokens than pieces: 0.80 to 0.90 of them with o200k_base and DeepSeek's
tokenizer, on prose (tau-bench) and on code and logs (SWE-agent, mini-swe-agent runs)."""


class PieceEncoder:
    """An estimate that follows how tokenizers split text rather than its length.

    Characters per token vary with the content (prose, code, paths, numbers, ruled lines); pieces
    vary far less: over the messages of the shared DeepSeek trajectories, the standard deviation of
    the log ratio to DeepSeek's own count is 0.085, against 0.18 for characters / 4. Since appended
    tool results are what a count anchored on confirmed usage estimates, that is the error which
    :class:`~contextkeep.CalibratedCounter` cannot learn away.
    """

    exact = False
    name = "pieces"

    def count(self, text: str) -> int:
        """An estimate from the number of word and symbol pieces in `text`."""
        return round(len(_PIECE.findall(text)) * _TOKENS_PER_PIECE)
