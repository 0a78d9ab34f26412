"""Anthropic's Messages API through the official `anthropic` SDK.

System messages travel in the `system` parameter, tool results as `tool_result` blocks
(see :mod:`contextkeep.formats.anthropic`). Tools and `tool_choice` may be given in
OpenAI's shape; they are converted. `finish_reason` uses OpenAI's words (`stop`,
`tool_calls`, `length`) so callers check one vocabulary; `raw.stop_reason` keeps Anthropic's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Self

from contextkeep._capabilities import ModelSpec, aresolve_model_spec
from contextkeep._errors import ConfigError
from contextkeep._formats.anthropic import from_anthropic, to_anthropic
from contextkeep._messages import Message
from contextkeep._usage import Usage
from contextkeep.models._common import (
    anthropic_tool,
    as_mapping,
    map_sdk_error,
    missing_extra,
    reject_truncated,
)
from contextkeep.models.adapter import ModelReply

if TYPE_CHECKING:
    import anthropic

__all__ = ["AnthropicAdapter", "parse_message"]

logger = logging.getLogger("contextkeep.models")

_PROVIDER = "anthropic"
# Blocks the neutral message holds; others (redacted thinking, server tool results) stay in `raw`.
_KNOWN_BLOCKS: Final = frozenset({"text", "thinking", "tool_use"})
_FINISH: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}
_TOOL_CHOICE: Final = {"auto": "auto", "required": "any", "none": "none"}


class AnthropicAdapter:
    """A :class:`~contextkeep.models.ModelAdapter` on the official `anthropic` SDK's Messages API.

    Anthropic requires `max_tokens`: the call's argument is used, else ``default_options``'
    ``max_tokens``, else `default_max_tokens`. With `stream=True` the reply is streamed and
    assembled by the SDK (needed for large `max_tokens`, which the SDK refuses unstreamed).
    """

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        default_max_tokens: int = 4096,
        stream: bool = False,
        default_options: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            import anthropic
        except ImportError as exc:
            raise missing_extra("AnthropicAdapter", "anthropic") from exc
        if default_max_tokens <= 0:
            raise ConfigError("default_max_tokens", f"must be positive, got {default_max_tokens}")
        self._client = (
            client if client is not None else anthropic.AsyncAnthropic(base_url=base_url, api_key=api_key)
        )
        self._sdk_error: type[Exception] = anthropic.AnthropicError
        self._spec = ModelSpec(model, context_window, max_output_tokens)
        self._default_max_tokens = default_max_tokens
        self._stream = stream
        self._defaults = dict(default_options or {})

    @classmethod
    async def create(
        cls,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        default_max_tokens: int = 4096,
        stream: bool = False,
        default_options: Mapping[str, Any] | None = None,
        registry: bool = True,
    ) -> Self:
        """Build the adapter with capacity resolved: explicit > registry > unknown.

        Anthropic's API publishes no context window, so no endpoint is probed.
        """
        adapter = cls(
            model,
            client=client,
            base_url=base_url,
            api_key=api_key,
            context_window=context_window,
            max_output_tokens=max_output_tokens,
            default_max_tokens=default_max_tokens,
            stream=stream,
            default_options=default_options,
        )
        adapter._spec = await aresolve_model_spec(
            model, context_window=context_window, max_output_tokens=max_output_tokens, registry=registry
        )
        return adapter

    @property
    def spec(self) -> ModelSpec:
        """Model key and capacity (`None` where unknown)."""
        return self._spec

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client calls go through."""
        return self._client

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        local_prompt_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        """Send the view and return the reply.

        `options` go to the SDK as request fields (`temperature`, `thinking`, `tool_choice`,
        `extra_headers`, ...), except ``stream``. With `local_prompt_tokens`, a reply from a
        server that cut the prompt to the window unasked (Ollama's Messages API) raises.
        Raises `ContextOverflowError` for a length error, `ProviderError` for any other failure.
        """
        system, converted = to_anthropic(messages)
        body: dict[str, Any] = {"max_tokens": self._default_max_tokens, **self._defaults, **options}
        stream = bool(body.pop("stream", self._stream))
        body |= {"model": self._spec.key, "messages": converted}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if system is not None:
            body["system"] = system
        if tools:
            body["tools"] = [anthropic_tool(t) for t in tools]
        if "tool_choice" in body:
            body["tool_choice"] = _tool_choice(body["tool_choice"])
        logger.debug(
            "%s call: %d messages, %d tools, stream=%s",
            self._spec.key,
            len(converted),
            len(tools or ()),
            stream,
        )
        try:
            if stream:
                async with self._client.messages.stream(**body) as events:
                    response: Any = await events.get_final_message()
            else:
                response = await self._client.messages.create(**body)
        except self._sdk_error as exc:
            raise map_sdk_error(exc, _PROVIDER) from exc
        reply = parse_message(response)
        logger.debug(
            "%s reply: finish=%s usage=%s/%s",
            self._spec.key,
            reply.finish_reason,
            reply.usage.input_tokens,
            reply.usage.output_tokens,
        )
        return reject_truncated(reply, local_prompt_tokens, self._spec)


def parse_message(response: Any) -> ModelReply:
    """A Messages API `message` (SDK object, read by attribute) as a `ModelReply`."""
    blocks = [as_mapping(b) for b in getattr(response, "content", None) or ()]
    kept = [b for b in blocks if b is not None and b.get("type") in _KNOWN_BLOCKS]
    if len(kept) != len(blocks):
        logger.debug("kept %d of %d reply blocks in the message; all are in raw", len(kept), len(blocks))
    (message,) = from_anthropic([{"role": "assistant", "content": kept}])
    stop = getattr(response, "stop_reason", None)
    return ModelReply(
        message=message,
        usage=Usage.from_anthropic(as_mapping(getattr(response, "usage", None))),
        finish_reason=_FINISH.get(stop, stop) if isinstance(stop, str) else None,
        model=getattr(response, "model", None),
        raw=response,
    )


def _tool_choice(choice: Any) -> Any:
    """OpenAI's `tool_choice` ("auto", "required", "none", or a named function) in Anthropic's shape."""
    if isinstance(choice, str) and choice in _TOOL_CHOICE:
        return {"type": _TOOL_CHOICE[choice]}
    function = choice.get("function") if isinstance(choice, Mapping) else None
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return {"type": "tool", "name": function["name"]}
    return choice
