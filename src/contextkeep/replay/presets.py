"""Strategy presets: other projects' context-management defaults, expressed as contextkeep settings.

A preset is `ContextConfig` overrides plus `ContextManager` options. The window and
the output reserve are not part of a preset: a replay sets them for every strategy
alike, so the strategies are compared at equal budgets. Each preset says where its
numbers come from and what the engine cannot reproduce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contextkeep._config import ContextConfig
from contextkeep._errors import ConfigError
from contextkeep._summarizers import ExtractiveSummarizer

__all__ = ["PRESETS", "Preset", "get_preset"]

_EVERY_CALL = 1e-9
"""A trigger/target ratio so low that the layers run before every call."""
_NO_INGEST_LIMIT = {"tool_result_limit": 10**9, "tool_result_limit_max_ratio": None}
"""A tool-result limit no result reaches, without the window cap: layer 0 never truncates."""


@dataclass(frozen=True, slots=True)
class Preset:
    """A named strategy."""

    name: str
    """What `--strategy` takes."""
    summary: str
    """One line: what the strategy does."""
    source: str
    """Where its numbers come from, and what the engine does differently."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """`ContextConfig` fields changed from contextkeep's defaults."""
    manager_options: Mapping[str, Any] = field(default_factory=dict)
    """Extra `ContextManager` keyword arguments (summariser, hooks)."""

    def config(self, **extra: Any) -> ContextConfig:
        """The validated config: contextkeep's defaults, then the preset, then `extra` (window, reserve)."""
        return ContextConfig(**{**self.overrides, **extra})


_ROLLING = {
    "layers": ("L1",),
    "trigger_ratio": _EVERY_CALL,
    "target_ratio": _EVERY_CALL,
    "max_observation_age_rounds": 5,
    "mask_min_saving_tokens": 0,  # SWE-agent masks every old output, whatever it saves
}

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "default",
            "contextkeep's defaults: L0 at 3,000 tokens capped at 5% of the window; L1 → L2 → L3 from "
            "70% of the budget down to 25%.",
            "ContextConfig defaults (DB-GPT thresholds, AgentScope's 3,000-token tool-result limit capped "
            "at 5% of the window, our 0.25 hysteresis target and 4,000-token working-set digest).",
        ),
        Preset(
            "swe-agent",
            "SWE-agent's LastNObservations(n=5): before every call, all but the 5 newest observations "
            "are masked.",
            "SWE-agent (commit 3ea751c) history_processors `last_n_observations` n=5, as in the "
            "replay_config of swe-agent/marshmallow-1867.function_calling.traj. Emulated as L1 only, "
            "triggered before every call, age 5 rounds, 20-character previews (the smallest the "
            "config allows), no L0. Differences: "
            "SWE-agent replaces an observation by 'Old environment output: (N lines omitted)', we keep "
            "a 20-character head/tail preview and a reference; outputs of 20 characters or fewer are "
            "never masked; ages count rounds, so a round with several tool results ages as one "
            "observation; at a budget SWE-agent does not have, L4 still guards the window.",
            {
                **_ROLLING,
                "truncated_observation_max_chars": 20,
                "mask_used_lines_chars": 0,  # SWE-agent keeps no line of a masked output
                **_NO_INGEST_LIMIT,
            },
        ),
        Preset(
            "rolling-mask",
            "SWE-agent-style rolling masking with contextkeep's own masking form and L0 at our budget.",
            "Same schedule as `swe-agent` (mask before every call, keep the 5 newest rounds' outputs) with "
            "contextkeep's defaults for the rest: 200-character previews with references, L0 at 3,000 "
            "tokens capped at 5% of the window, L4 as the overflow guard; no dropping, no summary.",
            dict(_ROLLING),
        ),
        Preset(
            "dbgpt",
            "DB-GPT's agent_context defaults: L1 → L2 → L3 at 70% / 90%, no hysteresis, no ingest limit.",
            "seeds/dbgpt-agent-context-management.zh.txt, [service.web.agent_context]: warning 0.70, "
            "error 0.90, critical 0.95, min_keep_recent_rounds 3, max_observation_age_rounds 5, "
            "truncated_observation_max_chars 200, min_keep_tokens 10000, max_compact_failures 3. DB-GPT "
            "compacts until the view is back under the warning threshold (target 0.69 here) and has no "
            "tool-result limit at ingest.",
            {"target_ratio": 0.69, "mask_used_lines_chars": 0, **_NO_INGEST_LIMIT},  # head/tail previews
        ),
        Preset(
            "agentscope",
            "AgentScope: summarise at 80% of the window, keep 10% of the window of recent messages.",
            "seeds/agentscope-context-management.zh.txt ContextConfig(trigger_ratio=0.8, reserve_ratio=0.1, "
            "tool_result_limit=3000; uncapped, as in AgentScope). Summary only (L3), triggered at the "
            "trigger (error threshold 0.8 of "
            "the budget, which the trigger always reaches). The replay summarises LLM-free "
            "(ExtractiveSummarizer). Difference: our L3 keeps min_keep_recent_rounds rounds, not "
            "reserve_ratio × window tokens (reserve_ratio only bounds L2, which is off here).",
            {
                "layers": ("L3",),
                "trigger_ratio": 0.8,
                "reserve_ratio": 0.1,
                "warning_threshold": 0.75,
                "error_threshold": 0.8,
                "target_ratio": 0.5,
                "tool_result_limit_max_ratio": None,
            },
            {"summarizer": ExtractiveSummarizer()},
        ),
        Preset(
            "langchain",
            "LangChain SummarizationMiddleware: summarise at 85% of the window, keep the last 20 messages.",
            "langchain-ai/langchain libs/langchain_v1/langchain/agents/middleware/summarization.py "
            "(commit d13823043d8): messages_to_keep=20 (_DEFAULT_MESSAGES_TO_KEEP), summary input trimmed "
            "to 4000 tokens; its own trigger default is None (never summarises), so the trigger is the "
            "profile-aware default of LangChain's deepagents compute_summarization_defaults: "
            "('fraction', 0.85). 20 messages = 10 rounds of one tool call each (min_keep_recent_rounds "
            "10); no masking, no ingest limit; summaries LLM-free (ExtractiveSummarizer) in the replay.",
            {
                "layers": ("L3",),
                "trigger_ratio": 0.85,
                "warning_threshold": 0.8,
                "error_threshold": 0.85,
                "target_ratio": 0.5,
                "min_keep_recent_rounds": 10,
                **_NO_INGEST_LIMIT,
            },
            {"summarizer": ExtractiveSummarizer()},
        ),
    )
}


def get_preset(name: str) -> Preset:
    """The preset called `name`; `ConfigError` names the known ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError("strategy", f"unknown strategy {name!r}; known: {', '.join(PRESETS)}") from None
