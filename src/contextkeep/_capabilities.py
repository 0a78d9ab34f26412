"""What a model can hold: context window and maximum output, and where those figures came from.

Resolution chain (principle 4, never guess): explicit value > the serving
endpoint's metadata (vLLM `/v1/models` `max_model_len`, Ollama `/api/show`
`<arch>.context_length`) > the `genai-prices` registry (context window only) >
unknown. Unknown capacity means no ratio is shown and no ratio-based compaction
happens. A configured window can only lower the model's (:func:`resolve_capacity`):
a budget never exceeds what the model can hold.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from contextkeep._errors import ConfigError

__all__ = [
    "Capacity",
    "CapacitySource",
    "ModelSpec",
    "aresolve_model_spec",
    "registry_context_window",
    "resolve_capacity",
    "resolve_model_spec",
    "served_window",
    "window_from_models",
]

logger = logging.getLogger("contextkeep.capabilities")


class CapacitySource(enum.StrEnum):
    """Where a capacity figure came from."""

    EXPLICIT = "explicit"
    """Set in code or configuration."""
    ENDPOINT = "endpoint"
    """Read from the serving endpoint's metadata."""
    UPSTREAM = "upstream"
    """Read from the proxied upstream's `/v1/models` (`contextkeep serve --upstream`)."""
    PROVIDER_ERROR = "provider_error"
    """Stated by the provider's own overflow error ("maximum context length is 16384 tokens")."""
    REGISTRY = "registry"
    """Looked up in the genai-prices registry."""
    CONFIG = "config"
    """The context configuration's `max_context_tokens`, below every known model figure."""
    UNKNOWN = "unknown"
    """Not known: ratios are not computed."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model's identity and capacity."""

    key: str
    """Stable model key (e.g. `deepseek-chat`, `openai:gpt-4.1`); scopes usage baselines."""
    context_window: int | None = None
    """Total tokens (input + output) the model accepts; `None` when unknown."""
    max_output_tokens: int | None = None
    """Largest reply the model produces; `None` when unknown."""
    source: CapacitySource = CapacitySource.EXPLICIT
    """Where `context_window` came from."""

    def __post_init__(self) -> None:
        if not self.key:
            raise ConfigError("model", "a model key is required")
        for name in ("context_window", "max_output_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ConfigError(name, f"must be a positive integer or unset, got {value!r}")
        if self.context_window is None and self.source is not CapacitySource.UNKNOWN:
            object.__setattr__(self, "source", CapacitySource.UNKNOWN)


@dataclass(frozen=True, slots=True)
class Capacity:
    """The context window one call may fill, and the figure that bound it."""

    window: int | None
    """Total tokens (input + output) the budget is built on; `None` when nothing is known."""
    source: CapacitySource
    """Which figure is the window: the model's (its own source) or the configuration's."""
    capped_from: int | None = None
    """A configured figure larger than the window (it asked for more than the model holds)."""


@functools.lru_cache(maxsize=256)  # pure, and asked twice per model call
def resolve_capacity(
    model_window: int | None,
    model_source: CapacitySource = CapacitySource.EXPLICIT,
    *,
    declared: int | None = None,
    limit: int | None = None,
) -> Capacity:
    """The smallest known of the model's window, its declared window and the configured limit.

    `declared` is the deployment's own figure for the model (DB-GPT `[[models.llms]]`
    `context_length`), an explicit model figure; `limit` is `max_context_tokens`. On a
    tie the model's figure is named, since it is what binds.
    """
    figures = (
        (declared, CapacitySource.EXPLICIT),
        (model_window, model_source),
        (limit, CapacitySource.CONFIG),
    )
    known = [(window, source) for window, source in figures if window is not None]
    if not known:
        return Capacity(None, CapacitySource.UNKNOWN)
    window, source = min(known, key=lambda figure: figure[0])
    asked = max((w for w in (declared, limit) if w is not None and w > window), default=None)
    return Capacity(window, source, asked)


def registry_context_window(model: str) -> int | None:
    """The context window genai-prices lists for `model`, if the package is installed and knows it."""
    try:
        from genai_prices import data_snapshot
    except ImportError:
        return None
    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, None, None)
    except Exception:  # the registry raises LookupError-like errors for unknown models
        return None
    window = getattr(info, "context_window", None)
    return window if isinstance(window, int) and window > 0 else None


_WINDOW_KEYS = ("max_model_len", "context_length", "context_window")
"""Where `/v1/models` entries state the window: vLLM, OpenRouter and LM Studio style, others."""


def window_from_models(payload: Any, model: str) -> int | None:
    """The window a `/v1/models` answer states for `model` (vLLM's `max_model_len`, `context_length`)."""
    data = payload.get("data") if isinstance(payload, Mapping) else None
    for entry in data or ():
        if isinstance(entry, Mapping) and entry.get("id") == model:
            for key in _WINDOW_KEYS:
                value = entry.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
            return None
    return None


def _window_from_ollama(payload: Any) -> int | None:
    info = payload.get("model_info") if isinstance(payload, Mapping) else None
    for key, value in (info or {}).items():
        if key.endswith(".context_length") and isinstance(value, int) and value > 0:
            return value
    return None


def _finish(
    model: str, window: int | None, max_output: int | None, endpoint: int | None, registry: bool
) -> ModelSpec:
    if window is not None:
        return ModelSpec(model, window, max_output, CapacitySource.EXPLICIT)
    if endpoint is not None:
        return ModelSpec(model, endpoint, max_output, CapacitySource.ENDPOINT)
    found = registry_context_window(model) if registry else None
    if found is not None:
        return ModelSpec(model, found, max_output, CapacitySource.REGISTRY)
    return ModelSpec(model, None, max_output, CapacitySource.UNKNOWN)


def _ollama_root(base_url: str) -> str:
    return base_url.rstrip("/").removesuffix("/v1")


def resolve_model_spec(
    model: str,
    *,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    registry: bool = True,
    timeout: float = 5.0,
) -> ModelSpec:
    """Resolve a model's capacity by the chain (explicit > endpoint > registry > unknown)."""
    endpoint = None
    if context_window is None and base_url:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        with httpx.Client(timeout=timeout, headers=headers) as client:
            endpoint = _probe_sync(client, base_url, model)
    return _finish(model, context_window, max_output_tokens, endpoint, registry)


async def aresolve_model_spec(
    model: str,
    *,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    registry: bool = True,
    timeout: float = 5.0,
) -> ModelSpec:
    """Async twin of :func:`resolve_model_spec`."""
    endpoint = None
    if context_window is None and base_url:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        async with httpx.AsyncClient(timeout=timeout, headers=headers) as client:
            endpoint = await _probe_async(client, base_url, model)
    return _finish(model, context_window, max_output_tokens, endpoint, registry)


def _probe_sync(client: httpx.Client, base_url: str, model: str) -> int | None:
    try:
        found = window_from_models(client.get(f"{base_url.rstrip('/')}/models").json(), model)
        if found is None:
            reply = client.post(f"{_ollama_root(base_url)}/api/show", json={"model": model})
            found = _window_from_ollama(reply.json()) if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        logger.info("no capacity metadata from %s: %s", base_url, exc)
        return None
    return found


async def served_window(
    client: httpx.AsyncClient, base_url: str, model: str, headers: Mapping[str, str] | None = None
) -> int | None:
    """The window an OpenAI-compatible server states for `model` (`/v1/models`, else Ollama's `/api/show`).

    `None` when it states none; raises `httpx.HTTPError` when it cannot be reached.
    """
    sent = dict(headers or {})
    try:
        found = window_from_models(
            (await client.get(f"{base_url.rstrip('/')}/models", headers=sent)).json(), model
        )
        if found is None:
            reply = await client.post(
                f"{_ollama_root(base_url)}/api/show", json={"model": model}, headers=sent
            )
            found = _window_from_ollama(reply.json()) if reply.status_code == 200 else None
    except ValueError:  # an answer that is not JSON: no model list there
        return None
    return found


async def _probe_async(client: httpx.AsyncClient, base_url: str, model: str) -> int | None:
    try:
        return await served_window(client, base_url, model)
    except httpx.HTTPError as exc:
        logger.info("no capacity metadata from %s: %s", base_url, exc)
        return None
