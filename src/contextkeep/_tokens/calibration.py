"""A counter anchored on provider-confirmed usage, estimating only what was added since.

Design principle 3: provider-confirmed usage anchors the count. After each call the provider
confirms, :class:`CalibratedCounter` remembers that prompt and the provider's `prompt_tokens`; a
later prompt that extends it is counted as the confirmed figure plus an estimate of the messages
appended since (tool results, the reply), so only those are ever estimated. A prompt that does not
extend it (a compaction rewrote the view) is estimated whole until the next confirmed call.

Estimates are scaled by the ratio *confirmed / local*, folded into an exponential average and
clamped so that one odd response (a provider's hidden prompt, a cached-prefix quirk) cannot
swing them wildly. Per-message counts stay cached unscaled: the ratio applies to totals, so the
cache stays valid as the ratio moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from contextkeep._errors import ConfigError
from contextkeep._messages import Message
from contextkeep._tokens.counter import CountSource, PromptCounter
from contextkeep._tokens.encoders import Encoder
from contextkeep._tokens.framing import Framing, Tools

__all__ = ["CalibratedCounter", "CalibratingCounter"]


@runtime_checkable
class CalibratingCounter(Protocol):
    """A counter that learns from the provider's count of each prompt it served.

    A session calls :meth:`observe` for every reply recorded with usage.
    """

    def observe(self, prompt: Sequence[Message], tools: Tools | None, confirmed_prompt_tokens: int) -> None:
        """`prompt` (with `tools`) was sent and the provider counted `confirmed_prompt_tokens`."""
        ...


@dataclass(frozen=True, slots=True)
class _Anchor:
    """The last confirmed prompt."""

    keys: list[str]
    """Its messages' content keys, in order."""
    raw: int
    """Its unscaled local count."""
    confirmed: int
    """The provider's count."""


class CalibratedCounter(PromptCounter):
    """A :class:`PromptCounter` whose totals are anchored on and scaled by confirmed usage."""

    def __init__(
        self,
        encoder: Encoder,
        framing: Framing,
        *,
        smoothing: float = 0.5,
        min_ratio: float = 0.5,
        max_ratio: float = 2.0,
        ratio: float = 1.0,
        cache_size: int = 65_536,
    ) -> None:
        if not 0 < smoothing <= 1:
            raise ConfigError("calibration.smoothing", f"must lie in (0, 1], got {smoothing}")
        if not 0 < min_ratio <= 1 <= max_ratio:
            raise ConfigError("calibration.min_ratio", "need 0 < min_ratio <= 1 <= max_ratio")
        super().__init__(encoder, framing, cache_size=cache_size)
        self.smoothing = smoothing
        """Weight of each new confirmed call in the average ratio (the first one sets it)."""
        self.min_ratio = min_ratio
        """Lowest ratio a confirmed call can teach."""
        self.max_ratio = max_ratio
        """Highest ratio a confirmed call can teach."""
        self.ratio = min(max(ratio, min_ratio), max_ratio)
        """The learned provider / local ratio (the starting one until a call is confirmed)."""
        self.samples = 0
        """Confirmed calls learned from."""
        self._anchor: _Anchor | None = None

    @property
    def source(self) -> CountSource:
        """Always an estimate: the ratio is learned, not exact."""
        return CountSource.ESTIMATE

    def observe(self, prompt: Sequence[Message], tools: Tools | None, confirmed_prompt_tokens: int) -> None:
        """Anchor on this confirmed prompt and fold its ratio in (a non-positive count teaches nothing)."""
        raw = super().count_prompt(prompt, tools)
        if raw <= 0 or confirmed_prompt_tokens <= 0:
            return
        sample = min(max(confirmed_prompt_tokens / raw, self.min_ratio), self.max_ratio)
        weight = 1.0 if self.samples == 0 else self.smoothing
        self.ratio = (1 - weight) * self.ratio + weight * sample
        self.samples += 1
        self._anchor = _Anchor(list(self._last.keys), raw, confirmed_prompt_tokens)

    def scale(self, raw: int) -> int:
        """A raw (unscaled) count scaled by the current ratio."""
        return round(raw * self.ratio)

    def count_text(self, text: str) -> int:
        """Tokens of `text`, scaled by the learned ratio."""
        return self.scale(super().count_text(text))

    def count_message(self, message: Message) -> int:
        """Tokens of one message with its framing, scaled by the learned ratio."""
        return self.scale(super().count_message(message))

    def counted(self, message: Message) -> int | None:
        """Scaled tokens of `message` when it was last encoded, if it was."""
        raw = super().counted(message)
        return None if raw is None else self.scale(raw)

    def count_prompt(self, messages: Sequence[Message], tools: Tools | None = None) -> int:
        """The confirmed count of the anchored prefix plus the scaled rest, else the scaled count."""
        raw = super().count_prompt(messages, tools)
        anchor = self._anchor
        if anchor is not None and self._last.keys[: len(anchor.keys)] == anchor.keys:
            # The confirmed prompt plus what was appended since (tools included, should they change).
            return anchor.confirmed + self.scale(raw - anchor.raw)
        return self.scale(raw)

    def last_totals(self, messages: Sequence[Message]) -> list[int] | None:
        """Scaled cumulative message tokens of `messages` if they were counted last (see PromptCounter)."""
        totals = super().last_totals(messages)
        return None if totals is None else [self.scale(t) for t in totals]
