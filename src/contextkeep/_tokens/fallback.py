"""Counting never fails for lack of a tokenizer: it falls back to an estimate.

DB-GPT: "如果 tokenizer 无法统计，则退化为粗略估算" (when the tokenizer cannot count, fall back to a
rough estimate, one token per 4 characters). A tokenizer that cannot be loaded (no network for
tiktoken, a missing or corrupt `tokenizer.json`) is replaced by an estimate for the whole counter
(`counter_for_model` calibrates it from confirmed usage); one that fails on a text (an encoder
asking a serving endpoint's `/tokenize` while it is down, say) counts that text with
:class:`~contextkeep.HeuristicEncoder`, never below DB-GPT's `len(text) // 4`.
Either way the counter's source becomes an estimate, and one warning is logged per cause.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from contextkeep._errors import TokenizerError
from contextkeep._tokens.encoders import Encoder, HeuristicEncoder

__all__ = ["FallbackEncoder", "load_or_none"]

logger = logging.getLogger("contextkeep.tokens")

_warned: set[tuple[str, str]] = set()
"""Causes already logged, (tokenizer, error type): a failing tokenizer is retried by every new
counter and a failing text may come back on every call, but each cause is worth one warning."""


def _warn_once(tokenizer: str, error: BaseException, what: str) -> None:
    cause = error.__cause__ or error
    key = (tokenizer, type(cause).__name__)
    if key not in _warned:
        _warned.add(key)
        logger.warning("%s: %s; counting with an estimate instead", what, error)


def load_or_none(load: Callable[[], Encoder], tokenizer: str) -> Encoder | None:
    """The encoder `load` builds, or None (logged once per cause) when it cannot be loaded."""
    try:
        return load()
    except TokenizerError as exc:
        _warn_once(tokenizer, exc, f"tokenizer {tokenizer!r} unavailable")
        return None


class FallbackEncoder:
    """A real tokenizer that never raises: a text it fails on is estimated instead.

    From the first such text on it reports itself inexact, so counts that include an estimate
    say so (`CountSource.ESTIMATE`).
    """

    def __init__(self, encoder: Encoder, fallback: Encoder | None = None) -> None:
        self.encoder = encoder
        self.fallback = fallback or HeuristicEncoder()
        self.name = encoder.name
        self.estimated = False
        """Whether any text was estimated."""

    @property
    def exact(self) -> bool:
        """Exact while the wrapped encoder is and no text had to be estimated."""
        return self.encoder.exact and not self.estimated

    def count(self, text: str) -> int:
        """The wrapped encoder's count, or the heuristic's for a text it fails on."""
        try:
            return self.encoder.count(text)
        except Exception as exc:  # a third-party tokenizer may raise anything on odd input
            self.estimated = True
            _warn_once(self.name, exc, f"tokenizer {self.name!r} failed on a text")
            return self.fallback.count(text)
