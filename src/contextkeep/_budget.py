"""Token budget and context states.

`effective = context_window - reserved_output`, `ratio = used / effective`. The
state is the highest threshold the ratio has reached. When the window is unknown
there is no effective budget: no ratio, no state, and no ratio-based compaction
(capacity is never guessed). A reservation that leaves the prompt no room is not
"unknown" (that silently turned compaction off): a configured one raises
`ConfigError`, a request's `max_tokens` is lowered (:func:`reserve_for`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from contextkeep._capabilities import CapacitySource
from contextkeep._errors import ConfigError

__all__ = [
    "Budget",
    "ContextState",
    "ReservedOutput",
    "Thresholds",
    "check_reserve",
    "reserve_for",
    "resolve_reserved_output",
]


class ContextState(enum.StrEnum):
    """How full the window is, by the configured thresholds."""

    NORMAL = "normal"
    """Below the warning threshold: nothing to do."""
    WARNING = "warning"
    """At or above `warning`: cheap compaction (masking, dropping rounds)."""
    ERROR = "error"
    """At or above `error`: a summary is due if cheap layers did not suffice."""
    CRITICAL = "critical"
    """At or above `critical`: like error, more urgent."""
    OVERFLOW = "overflow"
    """At or above `overflow`: the prompt does not fit the effective budget."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Ratios at which each state begins; each in (0, 1] and strictly increasing."""

    warning: float = 0.70
    """Start of `warning`."""
    error: float = 0.90
    """Start of `error`."""
    critical: float = 0.95
    """Start of `critical`."""
    overflow: float = 1.00
    """Start of `overflow`."""

    def __post_init__(self) -> None:
        previous_name, previous = "", 0.0
        for name in ("warning", "error", "critical", "overflow"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 < value <= 1:
                raise ConfigError(f"{name}_threshold", f"must lie in (0, 1], got {value!r}")
            if value <= previous:
                raise ConfigError(
                    f"{name}_threshold",
                    f"must be greater than {previous_name}_threshold ({previous}), got {value}",
                )
            previous_name, previous = name, value

    def state(self, ratio: float) -> ContextState:
        """The state a ratio falls in."""
        if ratio >= self.overflow:
            return ContextState.OVERFLOW
        if ratio >= self.critical:
            return ContextState.CRITICAL
        if ratio >= self.error:
            return ContextState.ERROR
        if ratio >= self.warning:
            return ContextState.WARNING
        return ContextState.NORMAL


class ReservedOutput(enum.StrEnum):
    """Which setting the output reservation came from."""

    EXPLICIT = "explicit"
    """The reservation configured for context management."""
    REQUEST = "request_max_tokens"
    """The `max_tokens` of the current request."""
    AGENT = "agent_max_tokens"
    """The agent's default `max_tokens`."""
    MODEL = "model_max_output"
    """The model's maximum output."""
    NONE = "none"
    """Nothing was set: nothing is reserved."""


def resolve_reserved_output(
    explicit: int | None = None,
    request_max_tokens: int | None = None,
    agent_max_tokens: int | None = None,
    model_max_output: int | None = None,
) -> tuple[int, ReservedOutput]:
    """Reserved output by the priority chain; `None` or 0 means "not set, fall through"."""
    chain = (
        (explicit, ReservedOutput.EXPLICIT),
        (request_max_tokens, ReservedOutput.REQUEST),
        (agent_max_tokens, ReservedOutput.AGENT),
        (model_max_output, ReservedOutput.MODEL),
    )
    for value, source in chain:
        if value is not None and value < 0:
            raise ConfigError(source.value, f"must not be negative, got {value}")
        if value:
            return value, source
    return 0, ReservedOutput.NONE


_SETTING = {
    ReservedOutput.EXPLICIT: "reserved_tokens",
    ReservedOutput.AGENT: "default_max_tokens",
    ReservedOutput.MODEL: "max_output_tokens",
}
"""The setting each static link of the chain comes from (what a `ConfigError` names)."""

CLAMPED_SHARE = 0.25
"""A request's `max_tokens` that fills the window, with no configured reservation that fits
to fall back on, reserves this share of the window (a 32k-token model with 8k of output)."""


def reserve_for(
    window: int | None,
    explicit: int | None = None,
    request_max_tokens: int | None = None,
    agent_max_tokens: int | None = None,
    model_max_output: int | None = None,
) -> tuple[int, int | None]:
    """The reservation of one call by the chain, and the figure it lowered (`None`: nothing lowered).

    A reservation that leaves the prompt no room in `window` is lowered, so compaction stays
    on: to the configured reservation (explicit, agent default, model maximum) when that fits,
    else `CLAMPED_SHARE` of the window. It comes from a request's `max_tokens` (a configured
    one was checked against the window when the manager was built, :func:`check_reserve`), or
    from a window learned since (a provider's overflow error). Lowered rather than refused:
    proxies forward whatever `max_tokens` agents send, often the model's catalogue maximum, and
    the upstream may accept it (Ollama and llama.cpp stop at the window); refusing the call
    would break agents that work without contextkeep. `Session.prepare` reports it as a
    `ReserveClamped` event.
    """
    reserved, _ = resolve_reserved_output(explicit, request_max_tokens, agent_max_tokens, model_max_output)
    if window is None or reserved < window:
        return reserved, None
    configured, _ = resolve_reserved_output(explicit, None, agent_max_tokens, model_max_output)
    return configured if 0 < configured < window else int(window * CLAMPED_SHARE), reserved


def check_reserve(
    window: int | None,
    explicit: int | None = None,
    agent_max_tokens: int | None = None,
    model_max_output: int | None = None,
) -> None:
    """Raise `ConfigError` naming the setting if the configured reservation fills `window`."""
    reserved, source = resolve_reserved_output(explicit, None, agent_max_tokens, model_max_output)
    if window is not None and reserved >= window:
        raise ConfigError(_SETTING[source], _no_room(reserved, window))


def _no_room(reserved: int, window: int) -> str:
    return (
        f"reserving {reserved} tokens for the reply leaves no room for the prompt in a {window}-token "
        "context window (compaction would be off): reserve less than the window"
    )


@dataclass(frozen=True, slots=True)
class Budget:
    """The input budget of one model call."""

    context_window: int | None
    """Total tokens the model accepts (input + output); `None` when unknown."""
    reserved_output: int = 0
    """Tokens kept free for the reply."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    """State thresholds."""
    capacity_source: CapacitySource = CapacitySource.EXPLICIT
    """Which figure `context_window` is (the model's, by its source, or the configuration's cap)."""
    outside: int = 0
    """Prompt tokens sent beside the messages (instructions a framework keeps outside them)."""
    clamped_from: int | None = None
    """The reservation asked for when it left the prompt no room (`reserved_output` is lower)."""

    def __post_init__(self) -> None:
        if self.context_window is not None and self.context_window <= 0:
            raise ConfigError("context_window", f"must be positive, got {self.context_window}")
        if self.reserved_output < 0:
            raise ConfigError("reserved_output", f"must not be negative, got {self.reserved_output}")
        if self.context_window is None:
            object.__setattr__(self, "capacity_source", CapacitySource.UNKNOWN)
        elif self.reserved_output >= self.context_window:
            raise ConfigError("reserved_output", _no_room(self.reserved_output, self.context_window))

    @property
    def effective(self) -> int | None:
        """Tokens available to the prompt (at least 1), or `None` when capacity is unknown.

        Instructions sent beside the messages that fill what the reply leaves put the view
        in overflow (compaction does what it can), never in "unknown".
        """
        if self.context_window is None:
            return None
        return max(self.context_window - self.reserved_output - self.outside, 1)

    def ratio(self, used: int) -> float | None:
        """`used / effective`, or `None` without a known budget."""
        effective = self.effective
        return None if effective is None else used / effective

    def remaining(self, used: int) -> int | None:
        """`effective - used` (negative when over), or `None` without a known budget."""
        effective = self.effective
        return None if effective is None else effective - used

    def state(self, used: int) -> ContextState | None:
        """The state `used` tokens put the window in, or `None` without a known budget."""
        ratio = self.ratio(used)
        return None if ratio is None else self.thresholds.state(ratio)

    def tokens_at(self, ratio: float) -> int | None:
        """Tokens that correspond to `ratio` of the effective budget."""
        effective = self.effective
        return None if effective is None else int(effective * ratio)
