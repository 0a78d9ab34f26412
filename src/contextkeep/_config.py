"""One validated configuration holding every knob of the three source designs.

`ContextConfig` is a pydantic model: an invalid value raises `ConfigError` naming
the key. It loads from a `contextkeep.toml` (our own `[context]` table, or
DB-GPT's `[service.web.agent_context]` with per-model `[[models.llms]]`
`context_length`) with `CONTEXTKEEP_<KEY>` environment overrides.
"""

from __future__ import annotations

import enum
import os
import string
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contextkeep._budget import Thresholds
from contextkeep._capabilities import Capacity, CapacitySource, resolve_capacity
from contextkeep._errors import ConfigError
from contextkeep._rounds import RepairPolicy

__all__ = ["ContextConfig", "FailureStrategy", "UsageMode", "build_config", "load_config"]

DEFAULT_COMPRESSION_PROMPT = (
    "Summarise the earlier part of this agent conversation so the agent can continue the task "
    "without it. Keep exact file paths, numbers, identifiers, variable names, commands, error "
    "messages and the user's own requests and constraints. Record decisions, results, what is done "
    "and what remains. Never invent anything that is not in the conversation."
)
DEFAULT_SUMMARY_TEMPLATE = (
    "<context_summary>\nThe earlier conversation was compacted. Summary:\n{summary}\n</context_summary>"
)


class FailureStrategy(enum.StrEnum):
    """What to do when a summary fails."""

    FAIL = "fail"
    """Raise: the model call does not happen."""
    USE_ORIGINAL = "use_original"
    """Go on with the view as it is (it may still overflow)."""
    EXTRACTIVE = "extractive"
    """Fall back to the deterministic, LLM-free summary."""


class UsageMode(enum.StrEnum):
    """Which token figures drive decisions."""

    COMBINED = "combined"
    """Provider-confirmed usage first (its flag is consumed first), then local counting."""
    CONFIRMED_ONLY = "confirmed_only"
    """Only provider-confirmed usage; no local estimate ever appears in confirmed fields."""
    LOCAL_ONLY = "local_only"
    """Only local counting; provider usage is recorded but drives nothing."""


class ContextConfig(BaseModel):
    """Every context-management setting, with the source designs' defaults."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, use_attribute_docstrings=True, validate_default=True
    )

    # Capacity (DB-GPT `max_context_tokens` / `reserved_tokens`; Agents-Flex `reservedOutputTokens`).
    max_context_tokens: int | None = Field(default=None, gt=0)
    """Context window cap: it can lower the model's window, never raise it; unset means the model decides."""
    model_context_length: int | None = Field(default=None, gt=0)
    """The model's window as its deployment declares it (DB-GPT `[[models.llms]]` `context_length`).

    An explicit model figure: the budget uses the smallest known of this, the model spec's
    window and `max_context_tokens`."""
    reserved_tokens: int = Field(default=0, ge=0)
    """Tokens reserved for output; 0 falls through to request max_tokens, agent default, model max output.

    A reservation that leaves the prompt no room in the window raises `ConfigError` (here against
    `max_context_tokens`/`model_context_length`, and against the model's window when a manager is
    built); a request's `max_tokens` that does is lowered, with a `context.reserve.clamped` event."""

    # States (DB-GPT).
    warning_threshold: float = 0.70
    """Ratio at which the view is compacted with cheap layers (masking, dropping)."""
    error_threshold: float = 0.90
    """Ratio at or above which a summary (layer 3) is made if cheap layers did not suffice."""
    critical_threshold: float = 0.95
    """Ratio of the critical state."""
    overflow_threshold: float = 1.0
    """Ratio of the overflow state."""
    target_ratio: float = Field(default=0.25, gt=0, lt=1)
    """Hysteresis: once triggered, compaction goes on until the view is at or below this ratio.

    Deep, rare passes: a pass rewrites the view after its first change at the cache-write price; at
    DeepSeek's prices one from 0.70 down to 0.35 repays that in about three calls, one to 0.55 in ten.
    Below about 0.3 the keep floor (`min_keep_tokens_max_ratio`) and the digest bound how deep a
    pass goes.
    """

    # Layers (DB-GPT layer semantics).
    layers: tuple[str, ...] = ("L1", "L2", "L3")
    """Which proactive layers run, in order: `L1`–`L3`, or names given to `register_layer`.

    Names are checked against the registry when a compactor is built (an unknown one raises
    `ConfigError` naming `layers.<i>`), so a layer may be registered after the config is made."""
    min_keep_recent_rounds: int = Field(default=3, ge=1)
    """Newest rounds always kept verbatim."""
    max_observation_age_rounds: int = Field(default=5, ge=1)
    """Tool outputs of rounds older than this are masked by layer 1."""
    truncated_observation_max_chars: int = Field(default=200, ge=20)
    """Characters of a masked tool output kept as preview (head and tail)."""
    mask_min_saving_tokens: int = Field(default=150, ge=0)
    """Layer 1 masks a tool output only when its preview saves at least this many tokens.

    Masks that save little cost what they save in lost detail (and break the cache for it); with a
    threshold a preview never replaces an output it would not shorten. 0 masks every old output
    (SWE-agent's policy), even where the preview and its reference are the longer."""
    mask_used_lines_chars: int = Field(default=300, ge=0)
    """Characters of a masked output's preview given to its whole lines naming what the agent used (0: none).

    The names come from the call that produced the output and the messages right after it, so the
    preview is the same whenever it is built again (the cached prefix holds); a preview that would
    not be shorter than the output leaves them out. On the DeepSeek replays at the default (deep)
    passes it changes no figure: most masked outputs soon leave the view with their rounds."""
    drop_digest_tokens: int = Field(default=4_000, ge=0)
    """Tokens of the working-set digest shown with the dropped-rounds marker of layer 2 (0: marker only).

    Verbatim and model-free: the agent's commands from the dropped rounds, each with its output's
    reference, then the lines of their outputs, of the agent's notes and of its code that name most
    of what the agent used. Made when the rounds are dropped, unchanged until the next drop (no
    extra cache breaks); at most 16 % of the budget (a bigger one would soon refill a small window).
    On the DeepSeek replays it keeps 0.980 of the reused terms in view (0.976 with their context)
    instead of 0.867 (0.862), for 0.570 × the raw cost instead of 0.540 ×: it is what lets passes
    drop deep without taking the reused terms with them."""
    min_keep_tokens: int = Field(default=10_000, ge=0)
    """Layer 2 keeps at least this many tokens of the newest rounds (when they exist)."""
    min_keep_tokens_max_ratio: float = Field(default=0.10, gt=0, le=1)
    """Caps `min_keep_tokens` at this share of the effective budget, so small windows still compact.

    What a pass keeps of the newest rounds beyond `min_keep_recent_rounds`: a low floor drops
    deeper (fewer passes, so fewer cache breaks), the digest keeping what the dropped rounds held."""
    max_image_num: int = Field(default=4, ge=0)
    """Images kept inline; older ones are replaced by their reference."""
    pin_first_user: bool = True
    """Keep the first user message (the task statement) in view after dropping or summarising."""
    max_compact_failures: int = Field(default=3, ge=1)
    """Consecutive summary failures that open the circuit breaker."""
    progress_in_prompt: Literal["on_compaction", "always"] = "on_compaction"
    """When the system prompt's task progress (completed steps) shows new steps.

    `on_compaction` (default): only when a compaction changes the view anyway, so between
    compactions the prompt prefix stays byte-identical and the provider's prompt cache holds.
    `always` (DB-GPT): from the first step on, every step; each one rewrites the system prompt,
    so every following call pays to write the whole prompt into the cache again."""

    # AgentScope ContextConfig.
    trigger_ratio: float | None = Field(default=None, gt=0, le=0.9)
    """AgentScope trigger: compact when the prompt exceeds this × context window (overrides warning)."""
    reserve_ratio: float | None = Field(default=None, gt=0, lt=1)
    """AgentScope reserve: recent tokens kept = this × context window (overrides min_keep_tokens)."""
    tool_result_limit: int = Field(default=3000, gt=0)
    """Tool results over this many tokens are cut at ingest (head and tail kept, full text offloaded)."""
    tool_result_limit_max_ratio: float | None = Field(default=0.05, gt=0, le=1)
    """Caps `tool_result_limit` at this share of the context window (`None`: no cap).

    Layer 1 leaves the newest `max_observation_age_rounds` outputs whole; at 5% each, five of them
    take a quarter of the window, so masking alone can reach the target in a small window."""
    compression_prompt: str = DEFAULT_COMPRESSION_PROMPT
    """Instruction sent to the summarising model."""
    summary_template: str = DEFAULT_SUMMARY_TEMPLATE
    """How the summary is placed into the view; `{summary}` is replaced by the rendered summary.

    It must hold `{summary}` and no other placeholder (`{{` and `}}` for literal braces): anything
    else raises `ConfigError` when the configuration is built, not at the first compaction."""
    summary_schema: dict[str, Any] | None = None
    """JSON Schema of the structured summary; unset means the five default fields."""
    max_summary_tokens: int = Field(default=2_000, gt=0)
    """Upper bound on a summary's size."""
    summary_role: Literal["user", "system"] = "user"
    """Role of the summary message (user keeps Anthropic's user-first rule)."""

    # Agents-Flex AgentContextUsagePolicy.
    usage_policy_enabled: bool = True
    """Track provider-confirmed usage and compress when the confirmed baseline reaches the threshold."""
    usage_mode: UsageMode = UsageMode.COMBINED
    """Which figures drive decisions."""
    compression_threshold_ratio: float = Field(default=0.85, gt=0, le=1)
    """Confirmed baseline / usable input at which compression is scheduled before the next call."""
    compress_on_token_limit_exceeded: bool = True
    """Recover from a provider's input or total context overflow by compacting and retrying."""
    max_token_limit_recovery_attempts: int = Field(default=1, ge=0)
    """How many compact-then-retry attempts one call may make."""
    keep_recent_turns: int | None = Field(default=None, ge=0)
    """Agents-Flex turn protection. Unset (the default, DB-GPT's rounds): a long task compacts its
    own older rounds, and only the current turn's user message stays in view whatever is cut.
    Set to N: the current turn (its user message and every call and result since) and the N
    complete turns before it are out of reach of L1–L3 and of deferred passes; only L4 may cut
    into the current turn, down to the system prompt and the last two rounds."""
    compression_failure_strategy: FailureStrategy = FailureStrategy.EXTRACTIVE
    """What happens when a summary fails."""

    # Ours.
    repair_policy: RepairPolicy = RepairPolicy.RAISE
    """What to do with a malformed history (raise, or repair and report)."""
    recovery_margin_tokens: int = Field(default=256, ge=0)
    """Extra tokens reactive compaction removes beyond the reported gap."""
    lease_ttl_ms: int = Field(default=15_000, gt=0)
    """How long the compaction lease lasts unless its holder renews it (the heartbeat does, while a
    pass runs); after that a silent holder's lease is taken over. A process that restarts on the
    same host takes over its dead predecessor's lease at once, whatever the TTL."""
    lease_heartbeat_ms: int | None = Field(default=None, gt=0)
    """How often a pass renews the lease it holds; unset: a third of `lease_ttl_ms`. Must be below
    `lease_ttl_ms`, so a live holder's lease never lapses between beats."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc) from None

    @field_validator("layers")
    @classmethod
    def _layer_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for i, name in enumerate(names):
            if not name or name != name.strip() or "," in name:  # events join layer names with commas
                raise ConfigError(f"layers.{i}", f"{name!r} is not a layer name")
        return names

    @field_validator("summary_template")
    @classmethod
    def _summary_slot(cls, template: str) -> str:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as exc:  # a lone `{` or `}`
            raise ConfigError("summary_template", f"{exc} (write a literal brace as {{{{ or }}}})") from None
        unknown = sorted({f for f in fields if f != "summary"})
        if unknown:
            raise ConfigError(
                "summary_template",
                f"unknown placeholder {{{unknown[0]}}}: only {{summary}} is filled in "
                "(write a literal brace as {{ or }})",
            )
        if "summary" not in fields:
            raise ConfigError("summary_template", "must contain {summary}, where the summary goes")
        return template

    @model_validator(mode="after")
    def _check(self) -> ContextConfig:
        self.thresholds()  # raises ConfigError naming the key
        if self.target_ratio >= self.warning_threshold:
            raise ConfigError("target_ratio", f"must be below warning_threshold ({self.warning_threshold})")
        if self.lease_heartbeat_ms is not None and self.lease_heartbeat_ms >= self.lease_ttl_ms:
            raise ConfigError("lease_heartbeat_ms", f"must be below lease_ttl_ms ({self.lease_ttl_ms})")
        windows = [w for w in (self.max_context_tokens, self.model_context_length) if w is not None]
        if windows and self.reserved_tokens >= min(windows):
            raise ConfigError(
                "reserved_tokens",
                f"{self.reserved_tokens} tokens reserved for the reply leave no room for the prompt "
                f"in a {min(windows)}-token window",
            )
        return self

    def lease_heartbeat(self) -> int:
        """Milliseconds between lease renewals (`lease_heartbeat_ms`, else a third of the TTL)."""
        return self.lease_heartbeat_ms or max(self.lease_ttl_ms // 3, 1)

    def thresholds(self) -> Thresholds:
        """The state thresholds."""
        return Thresholds(
            self.warning_threshold, self.error_threshold, self.critical_threshold, self.overflow_threshold
        )

    def capacity(self, window: int | None, source: CapacitySource = CapacitySource.EXPLICIT) -> Capacity:
        """The window a model of `window` tokens (from `source`) gets under this configuration."""
        return resolve_capacity(
            window, source, declared=self.model_context_length, limit=self.max_context_tokens
        )

    def result_limit(self, window: int | None) -> int:
        """Layer 0's limit for a model of `window` tokens (no known window: no cap)."""
        window = self.capacity(window).window
        if window is None or self.tool_result_limit_max_ratio is None:
            return self.tool_result_limit
        return max(1, min(self.tool_result_limit, int(self.tool_result_limit_max_ratio * window)))

    def merged(self, **changes: Any) -> ContextConfig:
        """A validated copy with `changes` applied."""
        return build_config({**self.model_dump(), **changes})


def _config_error(exc: ValidationError) -> ConfigError:
    first = exc.errors()[0]
    original = first.get("ctx", {}).get("error")
    if isinstance(original, ConfigError):
        return original
    key = ".".join(str(p) for p in first["loc"]) or "config"
    return ConfigError(key, f"{first['msg']} (got {first.get('input')!r})")


def build_config(values: Mapping[str, Any]) -> ContextConfig:
    """Validate `values` into a config; the error names the offending key."""
    return ContextConfig(**dict(values))


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def env_bool(variable: str, raw: str) -> bool:
    """A boolean environment variable's value; anything but the accepted words raises `ConfigError`.

    A typo (`maybe`, `ture`) must not silently read as false and turn a feature off.
    """
    word = raw.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    accepted = ", ".join((*_TRUE, *_FALSE))
    raise ConfigError(variable, f"{raw!r} is not a boolean (accepted, in any case: {accepted})")


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field in ContextConfig.model_fields.items():
        raw = environ.get(f"CONTEXTKEEP_{name.upper()}")
        if raw is None:
            continue
        annotation = str(field.annotation)
        if "tuple" in annotation:
            out[name] = tuple(p.strip() for p in raw.split(",") if p.strip())
        elif "bool" in annotation:
            out[name] = env_bool(f"CONTEXTKEEP_{name.upper()}", raw)
        else:
            out[name] = raw  # pydantic converts numbers and enums from text
    return out


def load_config(
    path: str | Path | None = None, *, model: str | None = None, environ: Mapping[str, str] | None = None
) -> ContextConfig:
    """Load `contextkeep.toml` (or `path`), apply `CONTEXTKEEP_*` overrides, validate.

    Reads `[context]`, or DB-GPT's `[service.web.agent_context]`; when `model` names an
    entry of `[[models.llms]]` with a `context_length`, that becomes `model_context_length`
    (the window is then the smaller of it and `max_context_tokens`).
    """
    values: dict[str, Any] = {}
    file = Path(path) if path is not None else Path("contextkeep.toml")
    if path is not None or file.exists():
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(str(file), f"cannot read configuration: {exc}") from None
        table = data.get("context") or data.get("service", {}).get("web", {}).get("agent_context", {})
        values.update(table)
        for entry in data.get("models", {}).get("llms", []):
            if model and entry.get("name") == model and "context_length" in entry:
                values.setdefault("model_context_length", entry["context_length"])
    values.update(_env_overrides(os.environ if environ is None else environ))
    return build_config(values)
