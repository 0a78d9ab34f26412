"""Any provider LiteLLM supports, through `litellm.acompletion` (optional: ``contextkeep[litellm]``).

LiteLLM answers in OpenAI's shape, so replies are read like OpenAI's. Its exceptions
carry `status_code`, `message` and `llm_provider`, which overflow classification reads;
its own `ContextWindowExceededError` counts as an overflow of UNKNOWN phase when the
wording tells nothing more.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from contextkeep._capabilities import ModelSpec
from contextkeep._formats.openai import to_openai
from contextkeep._messages import Message
from contextkeep.models._common import map_sdk_error, missing_extra, openai_tool, reject_truncated
from contextkeep.models.adapter import ModelReply
from contextkeep.models.openai import parse_completion

__all__ = ["LiteLLMAdapter"]

logger = logging.getLogger("contextkeep.models")


class LiteLLMAdapter:
    """A :class:`~contextkeep.models.ModelAdapter` on `litellm.acompletion`.

    `model` is LiteLLM's model string (e.g. ``"bedrock/anthropic.claude-3-5-sonnet"``).
    Capacity is only what is given here: LiteLLM's own table is not consulted.
    `default_options` are sent with every call (``api_base``, ``api_key``, ...).
    """

    def __init__(
        self,
        model: str,
        *,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        default_options: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            # Imported by name: litellm is heavy and untyped, and usually not installed.
            litellm: Any = importlib.import_module("litellm")
        except ImportError as exc:
            raise missing_extra("LiteLLMAdapter", "litellm") from exc
        self._acompletion: Any = litellm.acompletion
        self._spec = ModelSpec(model, context_window, max_output_tokens)
        self._defaults = dict(default_options or {})

    @property
    def spec(self) -> ModelSpec:
        """Model key and capacity (`None` where unknown)."""
        return self._spec

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        local_prompt_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        """Send the view; raises `ContextOverflowError` (silent truncation too) or `ProviderError`."""
        body: dict[str, Any] = {**self._defaults, **options}
        body |= {"model": self._spec.key, "messages": to_openai(messages)}
        if tools:
            body["tools"] = [openai_tool(t) for t in tools]
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        logger.debug("litellm call: %s, %d messages", self._spec.key, len(messages))
        try:
            response = await self._acompletion(**body)
        except Exception as exc:  # litellm's errors share no base class we can name without importing it
            raise map_sdk_error(exc, "litellm") from exc
        return reject_truncated(parse_completion(response), local_prompt_tokens, self._spec)
