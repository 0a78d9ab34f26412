"""What the model adapters share.

The optional-SDK error, SDK error mapping, the silent-truncation check and tool shapes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from contextkeep._capabilities import ModelSpec
from contextkeep._errors import ConfigError, ModelError
from contextkeep.models.adapter import ModelReply
from contextkeep.models.overflow import check_silent_truncation, classify_exception

__all__ = [
    "ProviderError",
    "anthropic_tool",
    "as_mapping",
    "map_sdk_error",
    "missing_extra",
    "openai_tool",
    "reject_truncated",
]

logger = logging.getLogger("contextkeep.models")

# Statuses where the same request may succeed later: timeout, conflict, quota, server side.
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_EMPTY_SCHEMA: Mapping[str, Any] = {"type": "object", "properties": {}}


class ProviderError(ModelError):
    """A model call failed for a reason other than context length (HTTP error, network, bad reply).

    `status_code` is the HTTP status when there was one; `__cause__` is the SDK's exception.
    """

    def __init__(self, message: str, *, provider: str, status_code: int | None = None) -> None:
        self.provider = provider
        self.status_code = status_code
        super().__init__(message)

    @property
    def retryable(self) -> bool:
        """Whether retrying the same request can help (no status: a connection failure)."""
        status = self.status_code
        return status is None or status in _RETRYABLE_STATUS or status >= 500


def missing_extra(adapter: str, extra: str) -> ConfigError:
    """The error for an adapter whose optional SDK is not installed."""
    return ConfigError(adapter, f"needs the optional dependency: pip install 'contextkeep[{extra}]'")


def map_sdk_error(exc: BaseException, provider: str) -> ModelError:
    """A provider's "too long" answer as `ContextOverflowError`, anything else as `ProviderError`.

    Raise the result `from exc` so the SDK error stays reachable as `__cause__`.
    """
    overflow = classify_exception(exc)
    if overflow is not None:
        logger.info(
            "%s overflow: phase=%s limit=%s requested=%s",
            provider,
            overflow.phase,
            overflow.limit,
            overflow.requested,
        )
        return overflow
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    logger.warning("%s call failed (status %s): %s", provider, status, exc)
    return ProviderError(f"{provider} call failed: {exc}", provider=provider, status_code=status)


def reject_truncated(reply: ModelReply, local_prompt_tokens: int | None, spec: ModelSpec) -> ModelReply:
    """`reply`, unless its prompt count shows the server cut the prompt to the window unasked (Ollama).

    Then `ContextOverflowError` (phase INPUT_CONTEXT) is raised: the reply answers a mutilated
    prompt. Without our own count (`local_prompt_tokens` None) nothing can be told.
    """
    if local_prompt_tokens is None:
        return reply
    truncated = check_silent_truncation(reply.usage.input_tokens, local_prompt_tokens, spec.context_window)
    if truncated is not None:
        logger.warning("%s: %s", spec.key, truncated)
        raise truncated
    return reply


def as_mapping(obj: Any) -> Mapping[str, Any] | None:
    """A reply fragment as a mapping: dicts as they are, SDK (pydantic) objects dumped."""
    if obj is None or isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    dumped = dump() if callable(dump) else None
    return dumped if isinstance(dumped, Mapping) else None


def openai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool in OpenAI's function shape; Anthropic-shaped tools (`input_schema`) are converted."""
    if "input_schema" not in tool or tool.get("type", "custom") != "custom":
        return dict(tool)
    function: dict[str, Any] = {"name": _tool_name(tool), "parameters": tool["input_schema"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def anthropic_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool in Anthropic's shape; OpenAI function tools are converted, others pass unchanged."""
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, Mapping):
        return dict(tool)
    out: dict[str, Any] = {
        "name": _tool_name(function),
        "input_schema": function.get("parameters") or dict(_EMPTY_SCHEMA),
    }
    if function.get("description"):
        out["description"] = function["description"]
    return out


def _tool_name(tool: Mapping[str, Any]) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("tools", f"tool without a name: {dict(tool)!r}")
    return name
