"""How close local counts come to the provider's recorded `prompt_tokens`."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from contextkeep._tokens import CalibratingCounter, TokenCounter
from contextkeep.replay.trajectories import Trajectory

__all__ = ["CallCount", "CountReport", "count_accuracy"]


@dataclass(frozen=True, slots=True)
class CallCount:
    """One model call: the local count beside the provider's."""

    call: int
    """0-based index among the trajectory's confirmed calls."""
    local: int
    """Locally counted prompt tokens (calibrated when calibration is on)."""
    provider: int
    """The provider's `prompt_tokens`."""

    @property
    def error_pct(self) -> float:
        """Signed error in percent of the provider's figure."""
        return (self.local - self.provider) / self.provider * 100


@dataclass(slots=True)
class CountReport:
    """Count accuracy over one trajectory."""

    name: str
    """The trajectory."""
    counter: str
    """The counter's id."""
    calls: list[CallCount] = field(default_factory=list)
    """Every confirmed call."""
    warmup: int = 0
    """Calls excluded from the figures (calibration warm-up)."""

    @property
    def scored(self) -> list[CallCount]:
        """The calls after the warm-up."""
        return self.calls[self.warmup :]

    @property
    def median_abs_error_pct(self) -> float:
        """Median absolute error over the scored calls."""
        return statistics.median(abs(c.error_pct) for c in self.scored) if self.scored else 0.0

    @property
    def max_abs_error_pct(self) -> float:
        """Worst absolute error over the scored calls."""
        return max((abs(c.error_pct) for c in self.scored), default=0.0)

    def to_dict(self) -> dict[str, object]:
        """The summary figures as JSON-ready values."""
        return {
            "trajectory": self.name,
            "counter": self.counter,
            "calls": len(self.scored),
            "warmup_calls": self.warmup,
            "median_abs_error_pct": round(self.median_abs_error_pct, 3),
            "max_abs_error_pct": round(self.max_abs_error_pct, 3),
        }


def count_accuracy(trajectory: Trajectory, counter: TokenCounter, *, warmup: int = 0) -> CountReport:
    """Count every confirmed call's prompt; a calibrating counter learns from each call after counting it.

    It learns as in a live session, which gives it each recorded reply's `prompt_tokens`.
    """
    report = CountReport(trajectory.name, counter.id, warmup=warmup)
    for n, call in enumerate(trajectory.confirmed_calls):
        provider = call.usage.get("prompt_tokens") if call.usage else None
        if not isinstance(provider, int) or provider <= 0:
            continue
        prompt = trajectory.messages[: call.index]
        local = counter.count_prompt(prompt, trajectory.tools)
        report.calls.append(CallCount(n, local, provider))
        if isinstance(counter, CalibratingCounter):
            counter.observe(prompt, trajectory.tools, provider)
    return report
