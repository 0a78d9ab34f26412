"""Recognise a provider's "context too long" answer and say which limit it broke.

When a request still overflows despite budgeting, the provider's error is the only
evidence of what went wrong. :func:`classify_error` turns a raw HTTP error (status and
body, as text or parsed JSON) into a :class:`~contextkeep.ContextOverflowError`
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
3. ``RULES`` (in ``_overflow_rules.py``, the one file to change for a new provider's
   wording) is a table of (provider, regex, phase) tried in order, most specific
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
from typing import Any, Final

from contextkeep._errors import ContextOverflowError, OverflowPhase
from contextkeep.models._overflow_rules import RULES, Rule

__all__ = ["check_silent_truncation", "classify_error", "classify_exception"]

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
    for rule in RULES:
        match = rule.pattern.search(haystack)
        if match is not None:
            return _build(rule, match, haystack, status, provider)
    return None


def _build(
    rule: Rule, match: re.Match[str], haystack: str, status: int | None, provider: str | None
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
        requested_output=completion,
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
