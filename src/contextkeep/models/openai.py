"""OpenAI chat completions, and every OpenAI-compatible server (vLLM, Ollama, DeepSeek, Qwen, ...).

```python
adapter = await OpenAIAdapter.create("qwen3-32b", base_url="http://vllm:8000/v1", api_key="none")
reply = await adapter.complete(view_messages, tools=tools, max_tokens=1024)
```

Ollama cuts a prompt longer than its `num_ctx` without an error. With
``local_prompt_tokens=`` (our own count of the prompt; `Session.complete`, the runner and
the proxy pass the view's) and `context_window` set to the `num_ctx` the server runs with,
a truncated prompt *raises* :class:`~contextkeep.ContextOverflowError` (phase
INPUT_CONTEXT, provider ``ollama``), and the reply, built from a mutilated prompt, is discarded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from contextkeep._capabilities import ModelSpec, aresolve_model_spec
from contextkeep._errors import ConfigError
from contextkeep._formats.openai import to_openai
from contextkeep._messages import Message, ToolCall
from contextkeep._usage import Usage
from contextkeep.models._common import (
    ProviderError,
    as_mapping,
    map_sdk_error,
    openai_tool,
    reject_truncated,
)
from contextkeep.models.adapter import ModelReply

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAIAdapter", "assistant_message", "parse_completion"]

logger = logging.getLogger("contextkeep.models")

_PROVIDER = "openai"


class OpenAIAdapter:
    """A :class:`~contextkeep.models.ModelAdapter` on the official `openai` SDK's chat completions.

    `client` wins over `base_url`/`api_key`. `spec` holds only explicit capacity; use
    :meth:`create` to read it from the endpoint (`/v1/models` `max_model_len`) or the registry.
    `default_options` are sent with every call (per-call options override them). With
    `stream=True` (or ``stream=True`` per call) replies are streamed with
    ``stream_options.include_usage`` so the usage in the last chunk is kept.
    """

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        stream: bool = False,
        default_options: Mapping[str, Any] | None = None,
    ) -> None:
        import openai  # a core dependency, imported late: `import contextkeep` stays light

        if client is None:
            try:
                client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key)
            except openai.OpenAIError as exc:  # raised when no API key is given or in the environment
                raise ConfigError("api_key", str(exc)) from exc
        self._client = client
        self._sdk_error: type[Exception] = openai.OpenAIError
        self._spec = ModelSpec(model, context_window, max_output_tokens)
        self._stream = stream
        self._defaults = dict(default_options or {})

    @classmethod
    async def create(
        cls,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        context_window: int | None = None,
        max_output_tokens: int | None = None,
        stream: bool = False,
        default_options: Mapping[str, Any] | None = None,
        registry: bool = True,
    ) -> Self:
        """Build the adapter and resolve its capacity: explicit > endpoint metadata > registry > unknown."""
        adapter = cls(
            model,
            client=client,
            base_url=base_url,
            api_key=api_key,
            context_window=context_window,
            max_output_tokens=max_output_tokens,
            stream=stream,
            default_options=default_options,
        )
        key = adapter._client.api_key
        adapter._spec = await aresolve_model_spec(
            model,
            context_window=context_window,
            max_output_tokens=max_output_tokens,
            base_url=str(adapter._client.base_url),
            api_key=key if isinstance(key, str) else None,
            registry=registry,
        )
        logger.info("%s capacity: window=%s (%s)", model, adapter._spec.context_window, adapter._spec.source)
        return adapter

    @property
    def spec(self) -> ModelSpec:
        """Model key and capacity (`None` where unknown)."""
        return self._spec

    @property
    def client(self) -> openai.AsyncOpenAI:
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

        `options` go to the SDK as request fields (`temperature`, `tool_choice`, `extra_body`,
        ...), except ``stream``. With `local_prompt_tokens`, a silently truncated prompt raises
        (see the module docs). Raises `ContextOverflowError` for a length error, `ProviderError`
        for any other failure.
        """
        body: dict[str, Any] = {**self._defaults, **options}
        stream = bool(body.pop("stream", self._stream))
        body |= {"model": self._spec.key, "messages": to_openai(messages)}
        if tools:
            body["tools"] = [openai_tool(t) for t in tools]
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        logger.debug(
            "%s call: %d messages, %d tools, stream=%s",
            self._spec.key,
            len(messages),
            len(tools or ()),
            stream,
        )
        try:
            reply = await (self._streamed(body) if stream else self._single(body))
        except self._sdk_error as exc:
            raise map_sdk_error(exc, _PROVIDER) from exc
        logger.debug(
            "%s reply: finish=%s usage=%s/%s",
            self._spec.key,
            reply.finish_reason,
            reply.usage.input_tokens,
            reply.usage.output_tokens,
        )
        return reject_truncated(reply, local_prompt_tokens, self._spec)

    async def _single(self, body: dict[str, Any]) -> ModelReply:
        return parse_completion(await self._client.chat.completions.create(**body))

    async def _streamed(self, body: dict[str, Any]) -> ModelReply:
        # Without include_usage an OpenAI stream carries no usage at all.
        body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        stream = await self._client.chat.completions.create(**body, stream=True)
        assembly = _StreamAssembly()
        try:
            async for chunk in stream:
                assembly.add(chunk)
        finally:
            await stream.close()
        return assembly.reply()


def parse_completion(response: Any) -> ModelReply:
    """A `chat.completion` (OpenAI SDK or LiteLLM object, read by attribute) as a `ModelReply`."""
    choices = getattr(response, "choices", None)
    if not choices:
        raise ProviderError("the reply has no choices", provider=_PROVIDER)
    choice = choices[0]
    message = choice.message
    calls = [as_mapping(c) for c in getattr(message, "tool_calls", None) or ()]
    return ModelReply(
        message=assistant_message(
            message.content,
            [c for c in calls if c is not None],
            _reasoning(message),
            getattr(message, "refusal", None),
        ),
        usage=Usage.from_openai(as_mapping(getattr(response, "usage", None))),
        finish_reason=choice.finish_reason,
        model=getattr(response, "model", None),
        raw=response,
    )


def assistant_message(
    content: str | None,
    tool_calls: Sequence[Mapping[str, Any]],
    reasoning: str | None,
    refusal: str | None = None,
) -> Message:
    """The neutral assistant message for an OpenAI-style reply's parts."""
    calls = tuple(_tool_call(c) for c in tool_calls)
    extra = {"refusal": refusal} if refusal else {}
    return Message("assistant", content, tool_calls=calls, reasoning=reasoning, extra=extra)


def _tool_call(call: Mapping[str, Any]) -> ToolCall:
    function = call.get("function") or {}
    name, call_id = function.get("name"), call.get("id")
    if not isinstance(name, str) or not isinstance(call_id, str):
        raise ProviderError(
            f"the reply has a tool call without id or name: {dict(call)!r}", provider=_PROVIDER
        )
    arguments = function.get("arguments")
    return ToolCall(call_id, name, arguments if isinstance(arguments, str) else "")


def _reasoning(obj: Any) -> str | None:
    """DeepSeek/Qwen `reasoning_content`, or `reasoning` (vLLM, Ollama, OpenRouter)."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(obj, name, None)
        if isinstance(value, str):
            return value
    return None


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _StreamAssembly:
    """Builds one reply from `chat.completion.chunk`s (choice 0)."""

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[_PartialCall] = []
        self.by_index: dict[int, _PartialCall] = {}
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.usage: Any = None

    def add(self, chunk: Any) -> None:
        self.chunks.append(chunk)
        self.model = self.model or getattr(chunk, "model", None)
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) != 0:
                continue
            self.finish_reason = choice.finish_reason or self.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                self.text.append(delta.content)
            reasoning = _reasoning(delta)
            if reasoning:
                self.reasoning.append(reasoning)
            for call in getattr(delta, "tool_calls", None) or ():
                self._add_call(call)

    def _add_call(self, delta: Any) -> None:
        index = delta.index if isinstance(delta.index, int) else len(self.calls)
        call = self.by_index.get(index)
        # Some servers send parallel calls under one index; a new id starts a new call.
        if call is None or (delta.id and call.id and delta.id != call.id):
            call = self.by_index[index] = _PartialCall()
            self.calls.append(call)
        call.id = delta.id or call.id
        function = delta.function
        if function is not None:
            call.name = function.name or call.name
            if function.arguments:
                call.arguments.append(function.arguments)

    def reply(self) -> ModelReply:
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": "".join(c.arguments)}}
            for c in self.calls
        ]
        # Like a non-streamed reply: no content beside tool calls, "" for an empty answer.
        content = "".join(self.text) if self.text or not calls else None
        return ModelReply(
            message=assistant_message(content, calls, "".join(self.reasoning) if self.reasoning else None),
            usage=Usage.from_openai(as_mapping(self.usage)),
            finish_reason=self.finish_reason,
            model=self.model,
            raw=self.chunks,
        )
