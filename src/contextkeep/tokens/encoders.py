"""Text encoders: the part of a token counter that turns text into a number.

- :class:`TiktokenEncoder`: OpenAI's BPE encodings (`o200k_base`, `cl100k_base`).
- :class:`HFEncoder`: any Hugging Face `tokenizer.json` (DeepSeek, Qwen, Llama, ...).
- :class:`HeuristicEncoder`: characters / 4, optionally counting CJK characters one each.
"""

from __future__ import annotations

import math
import os
import re
from functools import lru_cache
from typing import Protocol, runtime_checkable

from contextkeep.errors import TokenizerError
from contextkeep.tokens._pieces import piece_counter

__all__ = ["Encoder", "HFEncoder", "HeuristicEncoder", "TiktokenEncoder", "encoding_for_model"]


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

    @classmethod
    def for_model(cls, model: str) -> TiktokenEncoder:
        """The encoding an OpenAI model family uses."""
        return cls(encoding_for_model(model))

    def count(self, text: str) -> int:
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

    @property
    def splits_natively(self) -> bool:
        """Whether text is split here rather than by `tokenizers` (same counts, about 3x faster)."""
        return self._pieces is not None

    def count(self, text: str) -> int:
        if self._pieces is not None:
            n = self._pieces.count(text)
            if n is not None:
                return n
        return len(self._tok.encode(text, add_special_tokens=False).ids)


# Kana, CJK ideographs (and extension A, compatibility), hangul, full-width forms: about a token each.
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


class HeuristicEncoder:
    """An estimate: one token per `chars_per_token` characters, CJK characters one token each."""

    exact = False

    def __init__(self, chars_per_token: float = 4.0, *, cjk_aware: bool = True) -> None:
        self.chars_per_token = chars_per_token
        self.cjk_aware = cjk_aware
        self.name = f"heuristic:{chars_per_token:g}{':cjk' if cjk_aware else ''}"

    def count(self, text: str) -> int:
        if not text:
            return 0
        # ASCII fast path: most agent traffic is code and logs.
        cjk = len(_CJK.findall(text)) if self.cjk_aware and not text.isascii() else 0
        return cjk + math.ceil((len(text) - cjk) / self.chars_per_token)
