"""Token counting: encoders, provider framings, cached prompt counters, calibration."""

from __future__ import annotations

import os

from contextkeep.errors import TokenizerError
from contextkeep.tokens.calibration import CalibratedCounter
from contextkeep.tokens.counter import CountSource, PromptCounter, TokenCounter
from contextkeep.tokens.encoders import (
    Encoder,
    HeuristicEncoder,
    HFEncoder,
    TiktokenEncoder,
    encoding_for_model,
)
from contextkeep.tokens.framing import (
    AnthropicFraming,
    DeepSeekFraming,
    Framing,
    OpenAIFraming,
    PlainFraming,
    framing_for_model,
)

__all__ = [
    "AnthropicFraming",
    "CalibratedCounter",
    "CountSource",
    "DeepSeekFraming",
    "Encoder",
    "Framing",
    "HFEncoder",
    "HeuristicEncoder",
    "OpenAIFraming",
    "PlainFraming",
    "PromptCounter",
    "TiktokenEncoder",
    "TokenCounter",
    "counter_for_model",
    "encoder_from_spec",
    "encoding_for_model",
    "framing_for_model",
]


def encoder_from_spec(spec: str, *, model: str = "") -> Encoder:
    """Build an encoder from a spec string.

    `tiktoken` (encoding chosen by model family), `tiktoken:o200k_base`,
    `hf:PATH` or a path to a `tokenizer.json`, `heuristic` (CJK-aware chars/4),
    `heuristic:3.5` (another chars-per-token figure).
    """
    kind, _, arg = spec.partition(":")
    if kind == "tiktoken":
        return TiktokenEncoder(arg or encoding_for_model(model))
    if kind == "hf":
        return HFEncoder(arg)
    if spec.endswith(".json") and os.path.exists(spec):
        return HFEncoder(spec)
    if kind == "heuristic":
        try:
            return HeuristicEncoder(float(arg) if arg else 4.0)
        except ValueError:
            raise TokenizerError(f"heuristic takes a number of characters per token, got {arg!r}") from None
    raise TokenizerError(
        f"unknown tokenizer spec {spec!r}: use tiktoken[:ENCODING], hf:PATH, a tokenizer.json path, "
        "or heuristic[:CHARS_PER_TOKEN]"
    )


def counter_for_model(
    model: str, tokenizer: str | Encoder | None = None, framing: Framing | None = None
) -> PromptCounter:
    """A cached prompt counter for `model`.

    Without `tokenizer`, OpenAI families get tiktoken and every other model the
    CJK-aware heuristic (wrap it in :class:`CalibratedCounter` to learn from usage).
    """
    if tokenizer is None:
        openai_family = framing_for_model(model).name == "openai" and model.lower().startswith(
            ("gpt", "o1", "o3", "o4", "chatgpt")
        )
        tokenizer = "tiktoken" if openai_family else "heuristic"
    encoder = encoder_from_spec(tokenizer, model=model) if isinstance(tokenizer, str) else tokenizer
    return PromptCounter(encoder, framing or framing_for_model(model))
