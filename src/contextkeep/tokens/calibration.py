"""A counter that learns its error from provider-confirmed usage.

After each call the provider confirms, the ratio *confirmed / local* is folded
into an exponential average per model, clamped so that one odd response (a
provider's hidden prompt, a cached-prefix quirk) cannot swing estimates wildly.
Per-message counts stay cached under the base counter; only the total is scaled.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextkeep.errors import ConfigError
from contextkeep.messages import Message
from contextkeep.tokens.counter import CountSource, TokenCounter
from contextkeep.tokens.framing import Tools

__all__ = ["CalibratedCounter"]


class CalibratedCounter:
    """Scales a base counter's totals by the learned provider/local ratio of one model."""

    def __init__(
        self,
        base: TokenCounter,
        *,
        smoothing: float = 0.5,
        min_ratio: float = 0.5,
        max_ratio: float = 2.0,
        ratio: float = 1.0,
    ) -> None:
        if not 0 < smoothing <= 1:
            raise ConfigError("calibration.smoothing", f"must lie in (0, 1], got {smoothing}")
        if not 0 < min_ratio <= 1 <= max_ratio:
            raise ConfigError("calibration.min_ratio", "need 0 < min_ratio <= 1 <= max_ratio")
        self.base = base
        self.smoothing = smoothing
        self.min_ratio = min_ratio
        self.max_ratio = max_ratio
        self.ratio = min(max(ratio, min_ratio), max_ratio)
        self.samples = 0

    @property
    def id(self) -> str:
        return self.base.id

    @property
    def source(self) -> CountSource:
        return CountSource.ESTIMATE

    def observe(self, local: int, confirmed: int) -> float:
        """Fold one confirmed call (`local` = this counter's unscaled count) in; return the new ratio."""
        if local <= 0 or confirmed <= 0:
            return self.ratio
        sample = min(max(confirmed / local, self.min_ratio), self.max_ratio)
        weight = 1.0 if self.samples == 0 else self.smoothing
        self.ratio = (1 - weight) * self.ratio + weight * sample
        self.samples += 1
        return self.ratio

    def scale(self, raw: int) -> int:
        """A raw (uncalibrated) count scaled by the current ratio."""
        return round(raw * self.ratio)

    def count_text(self, text: str) -> int:
        return self.scale(self.base.count_text(text))

    def count_message(self, message: Message) -> int:
        return self.scale(self.base.count_message(message))

    def count_prompt(self, messages: Sequence[Message], tools: Tools | None = None) -> int:
        return self.scale(self.base.count_prompt(messages, tools))

    def last_totals(self, messages: Sequence[Message]) -> list[int] | None:
        """The base counter's cumulative totals of `messages` if it counted them last, scaled."""
        last = getattr(self.base, "last_totals", None)
        totals: list[int] | None = last(messages) if last is not None else None
        return None if totals is None else [self.scale(t) for t in totals]

    def raw_prompt(self, messages: Sequence[Message], tools: Tools | None = None) -> int:
        """The base counter's unscaled count (what `observe` expects as `local`)."""
        return self.base.count_prompt(messages, tools)
