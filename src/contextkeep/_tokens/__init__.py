"""Token counting: encoders, provider framings, cached prompt counters, calibration."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from contextkeep._errors import TokenizerError
from contextkeep._tokens.calibration import CalibratedCounter, CalibratingCounter
from contextkeep._tokens.counter import CountSource, IncrementalCounter, PromptCounter, TokenCounter
from contextkeep._tokens.encoders import (
    Encoder,
    HeuristicEncoder,
    HFEncoder,
    PieceEncoder,
    TiktokenEncoder,
    encoding_for_model,
)
from contextkeep._tokens.fallback import FallbackEncoder, load_or_none
from contextkeep._tokens.framing import (
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
    "CalibratingCounter",
    "CountSource",
    "DeepSeekFraming",
    "Encoder",
    "FallbackEncoder",
    "Framing",
    "HFEncoder",
    "HeuristicEncoder",
    "IncrementalCounter",
    "OpenAIFraming",
    "PieceEncoder",
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
    """Build an encoder from a spec string; raises `TokenizerError` when it cannot.

    `tiktoken` (encoding chosen by model family), `tiktoken:o200k_base`,
    `hf:PATH` or a path to a `tokenizer.json`, `heuristic` (CJK-aware chars/4),
    `heuristic:3.5` (another chars-per-token figure), `pieces` (:class:`PieceEncoder`).
    """
    return _loader(spec, model)()


def _loader(spec: str, model: str) -> Callable[[], Encoder]:
    """What builds the encoder `spec` names (a malformed spec raises here, a failed load when called)."""
    kind, _, arg = spec.partition(":")
    if kind == "tiktoken":
        return lambda: _shared_tiktoken(arg or encoding_for_model(model))
    if kind == "hf":
        return lambda: _shared_hf(arg)
    if spec.endswith(".json"):
        return lambda: _shared_hf(spec)
    if spec == "pieces":
        return PieceEncoder
    if kind == "heuristic":
        try:
            chars_per_token = float(arg) if arg else 4.0
        except ValueError:
            raise TokenizerError(f"heuristic takes a number of characters per token, got {arg!r}") from None
        return lambda: HeuristicEncoder(chars_per_token)
    raise TokenizerError(
        f"unknown tokenizer spec {spec!r}: use tiktoken[:ENCODING], hf:PATH, a tokenizer.json path, "
        "heuristic[:CHARS_PER_TOKEN] or pieces"
    )


def counter_for_model(
    model: str,
    tokenizer: str | Encoder | None = None,
    framing: Framing | None = None,
    *,
    calibrate: bool | None = None,
    strict: bool = False,
) -> PromptCounter:
    """A cached prompt counter for `model`.

    Without `tokenizer`, OpenAI families get tiktoken; every other model a
    :class:`CalibratedCounter` over :class:`PieceEncoder` (anchored on each confirmed
    call's `prompt_tokens` once a session records usage), or with `calibrate=False`
    the CJK-aware characters / 4 heuristic. `calibrate=True` calibrates any encoder.

    A tokenizer that cannot be loaded falls back to that same estimate, and a real
    tokenizer that fails on a text counts that text with the heuristic
    (:class:`FallbackEncoder`); each cause is logged once as a warning on the
    `contextkeep.tokens` logger, and the count's source says `estimate`. With
    `strict=True` both raise instead (`TokenizerError` for a load). A malformed
    spec always raises.
    """
    encoder: Encoder | None
    if tokenizer is None and not _openai_family(model):
        encoder = None
    elif tokenizer is None or isinstance(tokenizer, str):
        spec = tokenizer or "tiktoken"
        load = _loader(spec, model)
        encoder = load() if strict else load_or_none(load, spec)
    else:
        encoder = tokenizer
    if encoder is None:  # no tokenizer for this family, or it failed to load: estimate
        calibrate = calibrate is not False
        encoder = PieceEncoder() if calibrate else HeuristicEncoder()
    elif encoder.exact and not strict:
        encoder = FallbackEncoder(encoder)
    framing = framing or framing_for_model(model)
    if calibrate:
        return CalibratedCounter(encoder, framing)
    return PromptCounter(encoder, framing)


_SHARED: dict[tuple[object, ...], Encoder] = {}
_SHARED_LOCK = threading.Lock()


def _shared(key: tuple[object, ...], build: Callable[[], Encoder]) -> Encoder:
    """One encoder per process for `key`: a tokenizer costs ~1 s and ~100 MiB to load, sessions are many."""
    with _SHARED_LOCK:  # held while loading: a second session asking for the same file waits for it
        encoder = _SHARED.get(key)
        if encoder is None:
            encoder = _SHARED[key] = build()
        return encoder


def _shared_tiktoken(encoding: str) -> Encoder:
    return _shared(("tiktoken", encoding), lambda: TiktokenEncoder(encoding))


def _shared_hf(path: str) -> Encoder:
    """A `tokenizer.json` shared by path, as long as the file is the same (size and modification time)."""
    try:
        st = os.stat(path)
    except OSError:
        return HFEncoder(path)  # raises the load error, naming the file
    key = ("hf", os.path.realpath(path), st.st_size, st.st_mtime_ns)
    return _shared(key, lambda: HFEncoder(path))


def _openai_family(model: str) -> bool:
    """Whether `model` is OpenAI's own (tiktoken counts it exactly)."""
    return framing_for_model(model).name == "openai" and model.lower().startswith(
        ("gpt", "o1", "o3", "o4", "chatgpt")
    )
