"""The wordings providers use to say "context too long", most specific first.

Each :class:`Rule` is a provider, a regex and the phase it reveals. Numbers come
from named groups: ``limit`` (the window or cap that was broken), ``prompt`` (input
tokens), ``completion`` (requested output) and ``total`` (what the provider says the
request needed). A phase of ``None`` means the wording covers several cases and the
phase follows from the figures. A new provider's wording is one more row here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from contextkeep._errors import OverflowPhase

__all__ = ["RULES", "Rule"]

_IN = OverflowPhase.INPUT_CONTEXT
_OUT = OverflowPhase.OUTPUT
_UNKNOWN = OverflowPhase.UNKNOWN

_N: Final = r"\d+"
# Count the numbers before "in the completion"/"in the output" without naming them all:
# OpenAI adds "N in the functions", OpenRouter "N of tool input".
_PARTS: Final = r"\([^()]*?"
_CTX: Final = rf"maximum context length is (?P<limit>{_N}) tokens\.?\s*However, "


@dataclass(frozen=True, slots=True)
class Rule:
    """One known wording; `phase` None means "derive it from the figures"."""

    provider: str | None
    """Who answers this way (`None`: several providers do)."""
    pattern: re.Pattern[str]
    """The wording, with the figures it states as named groups."""
    phase: OverflowPhase | None
    """The limit it says was broken, or `None` to derive it from the figures."""


def _rule(provider: str | None, pattern: str, phase: OverflowPhase | None) -> Rule:
    return Rule(provider, re.compile(pattern, re.IGNORECASE | re.DOTALL), phase)


RULES: Final[tuple[Rule, ...]] = (
    # --- OpenAI-style "maximum context length is N tokens. However, ..." family ---
    _rule("openai", _CTX + rf"your messages resulted in (?P<prompt>{_N}) tokens", _IN),
    _rule("vllm", _CTX + rf"your request has (?P<prompt>{_N}) input tokens", _IN),
    _rule(
        "vllm",
        _CTX + rf"you requested (?P<completion>{_N}) output tokens and your prompt contains"
        rf" at least (?P<prompt>{_N}) input tokens(?:, for a total of at least (?P<total>{_N}))?",
        None,
    ),
    _rule(
        "openrouter",
        _CTX + rf"you requested about (?P<total>{_N}) tokens {_PARTS}(?P<completion>{_N}) in the"
        r" output\)",
        None,
    ),
    # Legacy OpenAI wording, kept by DeepSeek and older vLLM: the provider is not knowable.
    _rule(
        "openai-compatible",
        _CTX + rf"you requested (?P<total>{_N}) tokens {_PARTS}(?P<completion>{_N}) in the"
        r" completion\)",
        None,
    ),
    _rule(
        "vllm",
        rf"'?max_tokens'? or '?max_completion_tokens'? is too large: (?P<completion>{_N})\."
        rf"\s*This model's maximum context length is (?P<limit>{_N}) tokens and your request"
        rf" has (?P<prompt>{_N}) input tokens",
        None,
    ),
    _rule(
        "vllm",
        rf"prompt \(length (?P<prompt>{_N})\) is longer than the maximum model length of"
        rf" (?P<limit>{_N})",
        _IN,
    ),
    _rule("vllm", rf"is longer than the maximum model length of (?P<limit>{_N})", _IN),
    _rule(
        "openai",
        rf"max_(?:completion_)?tokens is too large: (?P<completion>{_N})\.\s*This model supports"
        rf" at most (?P<limit>{_N}) completion tokens",
        _OUT,
    ),
    _rule("openai", r"input exceeds the context window", _IN),
    # --- Anthropic ---
    _rule(
        "anthropic",
        rf"prompt is too long: (?P<prompt>{_N}) tokens > (?P<limit>{_N}) maximum",
        _IN,
    ),
    _rule(
        "anthropic",
        rf"input length and `?max_tokens`? exceed context limit: (?P<prompt>{_N}) \+"
        rf" (?P<completion>{_N}) > (?P<limit>{_N})",
        None,
    ),
    _rule(
        "anthropic",
        rf"max_tokens: (?P<completion>{_N}) > (?P<limit>{_N}), which is the maximum allowed"
        r" number of output tokens",
        _OUT,
    ),
    # --- Google, Mistral, Qwen and others ---
    _rule(
        "gemini",
        rf"input token count \((?P<prompt>{_N})\) exceeds the maximum number of tokens allowed"
        rf" \((?P<limit>{_N})\)",
        _IN,
    ),
    _rule(
        "mistral",
        rf"Prompt contains (?P<prompt>{_N}) tokens[^.]*?too large for model with (?P<limit>{_N})"
        r" maximum context length",
        _IN,
    ),
    _rule("dashscope", rf"Range of input length should be \[\s*1\s*,\s*(?P<limit>{_N})\s*\]", _IN),
    _rule("dashscope", rf"Range of max_tokens should be \[\s*1\s*,\s*(?P<limit>{_N})\s*\]", _OUT),
    _rule(
        "xai",
        rf"maximum prompt length is (?P<limit>{_N}) but the request contains (?P<prompt>{_N})"
        r" tokens",
        _IN,
    ),
    _rule(
        "together",
        rf"input \((?P<prompt>{_N}) tokens\) is longer than the model's context length"
        rf" \((?P<limit>{_N}) tokens\)",
        _IN,
    ),
    _rule(
        "moonshot",
        rf"exceeded model token limit: (?P<limit>{_N})(?: \(requested: (?P<total>{_N})\))?",
        _UNKNOWN,
    ),
    _rule("cerebras", rf"Current length is (?P<total>{_N}) while limit is (?P<limit>{_N})", _UNKNOWN),
    _rule("bedrock", r"input is too long for requested model", _IN),
    # --- TGI (also behind Together and Zhipu); the total rule must precede the output one ---
    _rule(
        "tgi",
        rf"`?inputs`? tokens \+ `?max_new_tokens`? must be <= (?P<limit>{_N})\. Given:"
        rf" (?P<prompt>{_N}) `?inputs`? tokens and (?P<completion>{_N}) `?max_new_tokens`?",
        None,
    ),
    _rule(
        "tgi",
        rf"`?inputs`? must have less than (?P<limit>{_N}) tokens\. Given: (?P<prompt>{_N})",
        _IN,
    ),
    _rule(
        "tgi",
        rf"`?max_new_tokens`? must be <= (?P<limit>{_N})\. Given: (?P<completion>{_N})",
        _OUT,
    ),
    # --- llama.cpp server: counts in the message, in n_prompt_tokens/n_ctx, or absent ---
    _rule(
        "llama.cpp",
        rf"(?:request|input) \((?P<prompt>{_N}) tokens\) (?:exceeds (?:the available )?context"
        rf" size|is larger than the max context size) \((?P<limit>{_N}) tokens\)",
        _IN,
    ),
    _rule(
        "llama.cpp",
        rf"(?:exceeds the available context size|exceed_context_size_error).*?"
        rf"n_prompt_tokens['\"]?\s*[:=]\s*(?P<prompt>{_N}).*?n_ctx['\"]?\s*[:=]\s*(?P<limit>{_N})",
        _IN,
    ),
    _rule("llama.cpp", r"exceeds the available context size|exceed_context_size_error", _IN),
    # --- Ollama ---
    _rule("ollama", r"prompt too long; exceeded (?:max )?context length", _IN),
    _rule("ollama", r"input length exceeds the context length", _IN),
    # --- Wordings that say "too long" but not which part: never recovered by guessing ---
    _rule("litellm", r"ContextWindowExceededError", _UNKNOWN),
    _rule(None, r"\bcontext[_ ]length[_ ]exceeded\b|\bmodel_context_window_exceeded\b", _UNKNOWN),
    _rule(None, rf"maximum context length is (?P<limit>{_N}) tokens", _UNKNOWN),
)
"""Every known wording, tried in order: the first match wins."""
