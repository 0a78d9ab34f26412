"""Recognise a provider's "context too long" answer and say which limit it broke.

When a request still overflows despite budgeting, the provider's error is the only
evidence of what went wrong. :func:`classify_error` turns a raw HTTP error (status and
body, as text or parsed JSON) into a :class:`~contextkeep.errors.ContextOverflowError`
carrying the phase (input, total, output or unknown), the limit and the tokens the
request needed, or ``None`` when the error is not about length.

How it works:

1. The body is flattened into text fragments: every string and number in it, with
   JSON nested inside strings (proxies that relay an upstream body, OpenRouter's
   ``metadata.raw``) parsed and flattened too. The body's shape therefore does not
   matter: OpenAI's ``{"error": {...}}``, Anthropic's ``{"type": "error", ...}``,
   vLLM's ``{"object": "error", ...}``, ``{"detail": ...}``, Gemini's and DashScope's
   bodies and plain text all reduce to the same haystack.
2. Status is only a hint: 429 is a quota and never an overflow; every other status is
   decided by content, because providers answer overflows with 400, 404, 413, 422,
   500 or, inside a stream, 200. Quota messages such as "Request too large ... tokens
   per min (TPM): Limit 30000, Requested 45000" match no rule and stay ``None``.
3. :data:`_RULES` is a table of (provider, regex, phase) tried in order, most specific
   first; the first match wins. Numbers come from named groups: ``limit`` (the window
   or cap that was broken), ``prompt`` (input tokens), ``completion`` (requested
   output) and ``total`` (what the provider says the request needed). A rule whose
   phase is ``None`` states both prompt and completion, and the phase follows from
   the figures (see :func:`_derive_phase`), since one wording covers all three cases.
4. Nothing is guessed: a 400 that matches no rule stays ``None``, and a length error
   whose phase the wording does not reveal is ``UNKNOWN``, which callers must not
   try to recover by compacting.

:func:`classify_exception` does the same for SDK exceptions (openai, anthropic,
litellm) by duck typing, without importing them. :func:`check_silent_truncation`
catches the case where there is no error at all: Ollama cuts a prompt longer than
``num_ctx`` and only its ``prompt_eval_count`` shows it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from contextkeep.errors import ContextOverflowError, OverflowPhase

__all__ = ["check_silent_truncation", "classify_error", "classify_exception"]

_IN = OverflowPhase.INPUT_CONTEXT
_OUT = OverflowPhase.OUTPUT
_UNKNOWN = OverflowPhase.UNKNOWN

_N: Final = r"\d+"
# Count the numbers before "in the completion"/"in the output" without naming them all:
# OpenAI adds "N in the functions", OpenRouter "N of tool input".
_PARTS: Final = r"\([^()]*?"
_CTX: Final = rf"maximum context length is (?P<limit>{_N}) tokens\.?\s*However, "


@dataclass(frozen=True, slots=True)
class _Rule:
    """One known wording; `phase` None means "derive it from the figures"."""

    provider: str | None
    pattern: re.Pattern[str]
    phase: OverflowPhase | None


def _rule(provider: str | None, pattern: str, phase: OverflowPhase | None) -> _Rule:
    return _Rule(provider, re.compile(pattern, re.IGNORECASE | re.DOTALL), phase)


_RULES: Final[tuple[_Rule, ...]] = (
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

# A 429 is a quota ("tokens per min (TPM): Limit 30000, Requested 45000"): waiting fixes it,
# compacting does not, whatever its text says about tokens.
_RATE_LIMITED: Final = 429
# Validation errors (pydantic's 422 "detail") echo the offending value under "input"; a user's
# prompt that quotes an overflow message must not read as one.
_ECHO_KEY: Final = "input"


def classify_error(
    status_code: int | None,
    body: str | Mapping[str, Any] | None,
    *,
    provider: str | None = None,
) -> ContextOverflowError | None:
    """Classify a raw HTTP error; `None` when it is not a context-length error.

    `body` is the response as it arrived: text (JSON or not) or already parsed JSON.
    `provider`, when given, names the provider in the result instead of the one
    guessed from the wording.
    """
    return _classify(status_code, _fragments(body), provider)


def classify_exception(exc: BaseException) -> ContextOverflowError | None:
    """Classify an SDK exception without importing the SDK.

    Reads what the openai and anthropic ``APIStatusError`` and litellm's exceptions
    carry: ``status_code`` (or ``response.status_code``), ``body``, ``message`` and
    ``llm_provider``. A :class:`ContextOverflowError` is returned unchanged; a new one
    keeps `exc` as its ``__cause__``.
    """
    if isinstance(exc, ContextOverflowError):
        return exc
    status = _status_of(exc)
    provider = _str_attr(exc, "llm_provider")
    sources: list[Any] = [getattr(exc, "body", None), _str_attr(exc, "message"), str(exc)]
    fragments = list(dict.fromkeys(f for source in sources for f in _fragments(source)))
    err = _classify(status, fragments, provider)
    if err is None and _is_litellm_context_window(exc):
        # litellm already decided it is an overflow; keep its verdict, not its phase.
        message = fragments[0] if fragments else type(exc).__name__
        err = ContextOverflowError(message, provider=provider or "litellm", status_code=status)
    if err is not None:
        err.__cause__ = exc
    return err


def check_silent_truncation(
    prompt_eval_count: int | None,
    local_prompt_tokens: int,
    num_ctx: int | None,
    *,
    tolerance: float = 0.05,
) -> ContextOverflowError | None:
    """Detect Ollama cutting a prompt to `num_ctx` without an error.

    Ollama keeps the start and end of an over-long prompt and reports only the tokens
    it evaluated. A truncation shows as `prompt_eval_count` at (within `tolerance` of)
    `num_ctx` while our own count is clearly larger than both. Both conditions are
    needed: a cached prefix also lowers `prompt_eval_count`, but not to `num_ctx`, and
    a local tokenizer may differ from the model's by a few percent.
    """
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    if prompt_eval_count is None or num_ctx is None or num_ctx <= 0:
        return None
    at_window = num_ctx * (1 - tolerance) <= prompt_eval_count <= num_ctx * (1 + tolerance)
    larger = local_prompt_tokens > max(prompt_eval_count, num_ctx) * (1 + tolerance)
    if not (at_window and larger):
        return None
    return ContextOverflowError(
        f"ollama silently truncated the prompt: evaluated {prompt_eval_count} tokens of about"
        f" {local_prompt_tokens} (num_ctx={num_ctx})",
        phase=OverflowPhase.INPUT_CONTEXT,
        limit=num_ctx,
        requested=local_prompt_tokens,
        provider="ollama",
    )


def _classify(status: int | None, fragments: list[str], provider: str | None) -> ContextOverflowError | None:
    if status == _RATE_LIMITED or not fragments:
        return None
    haystack = "\n".join(fragments)
    for rule in _RULES:
        match = rule.pattern.search(haystack)
        if match is not None:
            return _build(rule, match, haystack, status, provider)
    return None


def _build(
    rule: _Rule, match: re.Match[str], haystack: str, status: int | None, provider: str | None
) -> ContextOverflowError:
    limit, prompt, completion, total = (
        _group_int(match, name) for name in ("limit", "prompt", "completion", "total")
    )
    if prompt is None and total is not None and completion is not None:
        prompt = total - completion
    phase = rule.phase if rule.phase is not None else _derive_phase(limit, prompt, completion)
    return ContextOverflowError(
        _line_at(haystack, match.start()),
        phase=phase,
        limit=limit,
        requested=_requested(phase, prompt, completion, total),
        provider=provider or rule.provider,
        status_code=status,
    )


def _derive_phase(limit: int | None, prompt: int | None, completion: int | None) -> OverflowPhase:
    """Which limit a "prompt + completion > window" message really broke.

    An output that alone fills the window cannot be fixed by compacting (OUTPUT); a
    prompt that alone fills it is an input overflow; otherwise only the sum is over.
    """
    if limit is None or prompt is None or completion is None:
        return OverflowPhase.UNKNOWN
    if completion >= limit:
        return OverflowPhase.OUTPUT
    if prompt >= limit:
        return OverflowPhase.INPUT_CONTEXT
    return OverflowPhase.TOTAL_CONTEXT


def _requested(
    phase: OverflowPhase, prompt: int | None, completion: int | None, total: int | None
) -> int | None:
    """The tokens the request needed for the limit its phase names."""
    if phase is OverflowPhase.INPUT_CONTEXT:
        return prompt if prompt is not None else total
    if phase is OverflowPhase.OUTPUT:
        return completion
    if total is not None:
        return total
    if prompt is not None and completion is not None:
        return prompt + completion
    return prompt if prompt is not None else completion


def _group_int(match: re.Match[str], name: str) -> int | None:
    value = match.groupdict().get(name)
    return int(value) if value else None


def _line_at(haystack: str, index: int) -> str:
    """The line holding the match, used as the error's message."""
    start = haystack.rfind("\n", 0, index) + 1
    end = haystack.find("\n", index)
    return haystack[start : end if end != -1 else None]


def _fragments(body: Any) -> list[str]:
    """Every string and number in `body`, in document order."""
    return [text for text in _walk(body) if text.strip()]


def _walk(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        parsed = _parse_json(value)
        if parsed is None:
            yield value
        else:
            yield from _walk(parsed)
    elif isinstance(value, Mapping):
        yield from _walk_items(value.items())
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _walk(item)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)


def _walk_items(items: Iterable[tuple[Any, Any]]) -> Iterator[str]:
    for key, value in items:
        if key == _ECHO_KEY:
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            # Keep the name: llama.cpp gives its counts only as n_prompt_tokens / n_ctx.
            yield f"{key}={value}"
        else:
            yield from _walk(value)


def _parse_json(text: str) -> Any:
    """The JSON document `text` holds, or None when it is plain text."""
    stripped = text.strip()
    # A leading quote is a body encoded twice, as some proxies relay it.
    if not stripped.startswith(("{", "[", '"')):
        return None
    try:
        parsed: Any = json.loads(stripped)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict | list | str) else None


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def _str_attr(obj: object, name: str) -> str | None:
    value = getattr(obj, name, None)
    return value if isinstance(value, str) and value else None


def _is_litellm_context_window(exc: BaseException) -> bool:
    return any(cls.__name__ == "ContextWindowExceededError" for cls in type(exc).__mro__)
