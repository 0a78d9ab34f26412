"""Provider-confirmed usage baselines (Agents-Flex's usage policy), as pure rules.

Only complete usage (a total, or both prompt and completion) establishes a
baseline. Partial or missing usage establishes nothing and invalidates a baseline
that existed, since this call's output changed the next call's context. Any
compaction invalidates it too, until the next complete usage arrives. Ratio and
remaining are reported only while the baseline is valid and capacity is known.

State is kept per conversation and *scope* (agent id + agent version + model key),
so switching models never reuses another model's baseline.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from contextkeep._usage import Usage

__all__ = [
    "USAGE_DOCUMENT",
    "BaselineFigures",
    "UsageState",
    "UsageStatus",
    "figures",
    "observe_usage",
    "scope_key",
    "ui_text",
]

USAGE_DOCUMENT = "usage"
"""The store document kind a :class:`UsageState` is saved under, one per scope (:func:`scope_key`)."""


class UsageStatus(enum.StrEnum):
    """Whether a confirmed baseline describes what the model will see next."""

    NO_CONFIRMED_USAGE = "NO_CONFIRMED_USAGE"
    """No complete provider usage yet."""
    CONFIRMED_BASELINE = "CONFIRMED_BASELINE"
    """The last complete usage matches the model-visible context."""
    BASELINE_INVALIDATED = "BASELINE_INVALIDATED"
    """Compaction or missing usage made the old baseline stale."""


def scope_key(agent_id: str, agent_version: str, model_key: str) -> str:
    """The usage scope: agent id + agent version + model key."""
    return f"{agent_id}|{agent_version}|{model_key}"


@dataclass(frozen=True, slots=True)
class UsageState:
    """The persisted usage state of one conversation and scope."""

    status: UsageStatus = UsageStatus.NO_CONFIRMED_USAGE
    """Baseline state."""
    baseline: int | None = None
    """Confirmed tokens the next call starts from (last prompt + completion); kept for audit when stale."""
    input_tokens: int | None = None
    """Last reported prompt tokens."""
    output_tokens: int | None = None
    """Last reported completion tokens."""
    total_tokens: int | None = None
    """Last reported total tokens."""
    model_key: str = ""
    """The model the figures are for."""
    version: int = 0
    """Store version (compare-and-set)."""

    @property
    def valid(self) -> bool:
        """Whether ratio and remaining may be shown."""
        return self.status is UsageStatus.CONFIRMED_BASELINE

    def invalidated(self) -> UsageState:
        """After a compaction: the baseline no longer describes the view."""
        if self.status is UsageStatus.NO_CONFIRMED_USAGE:
            return self
        return replace(self, status=UsageStatus.BASELINE_INVALIDATED)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form (without the version, which the store keeps)."""
        data = asdict(self)
        data.pop("version")
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], version: int) -> UsageState:
        """Inverse of :meth:`to_dict`."""
        if not data:
            return cls(version=version)
        return cls(**{**data, "status": UsageStatus(data["status"]), "version": version})


@dataclass(frozen=True, slots=True)
class BaselineFigures:
    """Ratio and remaining of a baseline against usable input; `None` whenever not reliable."""

    usable_input: int | None
    """Context window - reserved output; `None` when capacity is unknown or all reserved."""
    ratio: float | None
    """Baseline / usable input."""
    remaining: int | None
    """Usable input - baseline."""


def figures(state: UsageState, context_window: int | None, reserved_output: int) -> BaselineFigures:
    """Figures of a state; nothing is computed from a stale baseline or unknown capacity."""
    usable = None
    if context_window is not None and reserved_output < context_window:
        usable = context_window - reserved_output
    if usable is None or not state.valid or state.baseline is None:
        return BaselineFigures(usable, None, None)
    return BaselineFigures(usable, state.baseline / usable, usable - state.baseline)


def observe_usage(state: UsageState, usage: Usage, model_key: str) -> UsageState:
    """The state after a successful call that reported `usage` (complete, partial or none)."""
    if usage.complete:
        return replace(
            state,
            status=UsageStatus.CONFIRMED_BASELINE,
            baseline=usage.baseline,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
            model_key=model_key,
        )
    # Partial or missing usage: this call's output changed the context, so an old baseline is stale.
    return state.invalidated()


def ui_text(
    state: UsageState, figures: BaselineFigures, *, compression_required: bool, chinese: bool = False
) -> str:
    """The recommended indicator text for a usage state (the seed's wording, in English or Chinese)."""
    if compression_required:
        return (
            "已接近上限,将在下一次模型调用前压缩"
            if chinese
            else "near the limit — will compact before the next call"
        )
    if state.status is UsageStatus.BASELINE_INVALIDATED:
        return (
            "上下文已压缩,等待下一次服务端 Usage 确认"
            if chinese
            else "compacted — waiting for the provider's confirmation"
        )
    if state.status is UsageStatus.NO_CONFIRMED_USAGE:
        return "模型未返回可用 Token Usage" if chinese else "the model returned no usage"
    if figures.ratio is None or figures.remaining is None:
        used = state.baseline or 0
        return f"最近确认:{used:,} Token" if chinese else f"last confirmed {used:,} tokens (capacity unknown)"
    if chinese:
        return f"最近确认:{figures.ratio * 100:.1f}%,剩余约 {figures.remaining:,} Token"
    return f"last confirmed {figures.ratio * 100:.1f} %, about {figures.remaining:,} tokens left"
