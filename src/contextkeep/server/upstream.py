"""The proxy's model adapter: one prepared view sent to the upstream OpenAI-compatible server.

It implements :class:`~contextkeep.models.ModelAdapter`, so `Session.complete` runs the
whole cycle (prepare → call → record, compact-and-retry on overflow). Upstream errors are
classified with :func:`~contextkeep.models.overflow.classify_error`: an input or total
overflow becomes a `ContextOverflowError` (recovered and retried by the session); any
other error is kept in :attr:`UpstreamAdapter.failure` and passed back to the client as it
came. When streaming, chunks are forwarded to :attr:`UpstreamAdapter.sink` as they arrive.

A prompt the upstream cut to its window without an error (Ollama) is caught from the
session's own count of the view: a non-streamed reply raises `ContextOverflowError` (so the
session compacts and retries); a streamed one, already forwarded, raises
:class:`TruncatedStreamError`, which is not retried.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from contextkeep._capabilities import ModelSpec
from contextkeep._errors import ContextOverflowError, ModelError
from contextkeep._formats.openai import from_openai, to_openai
from contextkeep._lineage import Lineage, extended_by, lineage_of
from contextkeep._messages import Message
from contextkeep._usage import Usage
from contextkeep.models._common import reject_truncated
from contextkeep.models.adapter import ModelReply
from contextkeep.models.openai import _StreamAssembly
from contextkeep.models.overflow import classify_error

__all__ = [
    "STARTED",
    "EncodedView",
    "TruncatedStreamError",
    "UpstreamAdapter",
    "UpstreamError",
    "UpstreamFailure",
    "upstream_headers",
]

logger = logging.getLogger("contextkeep.server")

STARTED = b""
"""Put on the sink once the upstream accepted a streamed request (status known, bytes follow)."""

_FORWARDED = ("openai-organization", "openai-project", "user-agent")
_STREAMING = frozenset({"stream", "stream_options"})
"""The client's streaming fields, not forwarded as they are: the adapter asks for its own."""


@dataclass(frozen=True, slots=True)
class UpstreamFailure:
    """An upstream answer that is not a success, returned to the client unchanged."""

    status: int
    """HTTP status."""
    body: bytes
    """Body as received."""
    content_type: str = "application/json"
    """Its content type."""


class UpstreamError(ModelError):
    """The upstream refused a call for a reason other than context length."""


class TruncatedStreamError(ModelError):
    """The upstream cut a streamed prompt to its window unasked; the reply already went to the client.

    Not retried (a second reply would follow the first on the same stream); `__cause__` is the
    `ContextOverflowError` with the figures.
    """


class _Attrs(dict[str, Any]):
    """A JSON object readable by attribute (what the SDK stream assembler expects)."""

    def __getattr__(self, name: str) -> Any:
        return self.get(name)


def upstream_headers(incoming: Mapping[str, str], api_key: str | None) -> dict[str, str]:
    """Headers sent upstream: the configured key, else the client's own `Authorization`."""
    out = {k: v for k, v in incoming.items() if k.lower() in _FORWARDED}
    if api_key:
        out["authorization"] = f"Bearer {api_key}"
    elif "authorization" in incoming:
        out["authorization"] = incoming["authorization"]
    return out


def call_body(
    options: Mapping[str, Any],
    tools: Sequence[Mapping[str, Any]] | None,
    max_tokens: tuple[str, int | None],
    **view: Any,
) -> dict[str, Any]:
    """The body of a call to a Messages or Responses upstream (a dict, for the adapter to finish).

    The client's fields as it sent them (streaming aside), the view's parts in `view` that are
    not None, the tools when any, and the output cap under the API's own name
    (`max_tokens` = ``("max_output_tokens", 1024)``).
    """
    body = {k: v for k, v in options.items() if k not in _STREAMING}
    body.update((k, v) for k, v in view.items() if v is not None)
    if tools:
        body["tools"] = list(tools)
    name, cap = max_tokens
    if cap is not None:
        body[name] = cap
    return body


_ENCODED: dict[str, bytes] = {}
_ENCODED_SIZE = 65_536


def _encoded(m: Message) -> bytes:
    """A view message as OpenAI JSON, encoded once per content (views repeat their messages)."""
    if m.content is not None and not isinstance(m.content, str):  # parts: not covered by the key
        return json.dumps(to_openai([m])[0]).encode()
    cached = _ENCODED.get(m.key)
    if cached is None:
        if len(_ENCODED) >= _ENCODED_SIZE:
            _ENCODED.clear()
        cached = _ENCODED[m.key] = json.dumps(to_openai([m])[0]).encode()
    return cached


@dataclass(slots=True)
class EncodedView:
    """The last body sent upstream for a conversation: the next, if its view extends it, encodes the rest.

    Joining every message's cached encoding still costs time in proportion to the history
    (~0.5 µs a message); the view builder's lineage vouches that a view holds the last one's
    messages, so their bytes in the last body are copied into the next as they are (the
    body is built in one copy, never re-joined).
    """

    lineage: Lineage | None = None
    sent: bytes = b""
    """The last body."""
    start: int = 0
    """Offset of its first message's encoding."""
    end: int = 0
    """Offset just after its last message's encoding."""

    def body(self, head: bytes, messages: Sequence[Message]) -> bytes:
        """`head` (a JSON object up to its array's `[`), `messages` joined with ``", "``, then ``]}``."""
        last = self.lineage
        parts: tuple[bytes | memoryview, ...]
        if last is not None and extended_by(messages, last):
            tail = b", ".join(map(_encoded, messages[last.length :]))
            kept = memoryview(self.sent)[self.start : self.end]
            parts = (head, kept, b", " if kept and tail else b"", tail, b"]}")
        else:
            parts = (head, b", ".join(map(_encoded, messages)), b"]}")
        sent = b"".join(parts)
        self.lineage, self.sent, self.start, self.end = lineage_of(messages), sent, len(head), len(sent) - 2
        return sent


def _request_body(fields: Mapping[str, Any], messages: Sequence[Message], encoded: EncodedView) -> bytes:
    """The JSON body of `fields` with `messages` last."""
    head = json.dumps({**{k: v for k, v in fields.items() if k != "messages"}, "messages": []}).encode()
    return encoded.body(head[: -len(b"]}")], messages)


@dataclass
class UpstreamAdapter:
    """Sends views for one proxied request (the request's own fields kept)."""

    client: httpx.AsyncClient
    """Client whose base URL is the upstream's (e.g. ``http://vllm:8000/v1``)."""
    spec: ModelSpec
    """The model the context manager budgets for."""
    headers: Mapping[str, str]
    """Headers for the upstream."""
    sink: Callable[[bytes], None] | None = None
    """Receives `STARTED`, then each streamed event's bytes (not `[DONE]`); `None` when not streaming."""
    include_usage: bool = True
    """Whether the client asked for the usage chunk (it is always requested upstream)."""
    on_call: Callable[[Sequence[Message], int], None] | None = None
    """Called with each view and its local token count before it is sent (the inspector's call history)."""
    failure: UpstreamFailure | None = None
    """Set when the upstream answered with an error that is not an overflow."""
    response: dict[str, Any] | None = None
    """The upstream's JSON reply (non-streamed)."""
    calls: int = 0
    """Upstream calls made."""
    encoded: EncodedView = field(default_factory=EncodedView)
    """The conversation's last view as sent (kept across its requests by the caller)."""
    content: bytes | None = None
    """The bytes of :attr:`response` as the upstream sent them."""
    _assembly: _StreamAssembly = field(default_factory=_StreamAssembly)

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        local_prompt_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        """Send `messages` with the request's other fields; see the module docs for errors."""
        fields: dict[str, Any] = dict(options)
        if tools:
            fields["tools"] = list(tools)
        if max_tokens is not None and "max_completion_tokens" not in fields:
            fields["max_tokens"] = max_tokens
        self.calling(messages, local_prompt_tokens)
        if self.sink is None:
            reply = await self._single(_request_body(fields, messages, self.encoded))
        else:
            fields["stream_options"] = {**(fields.get("stream_options") or {}), "include_usage": True}
            reply = await self._streamed(_request_body(fields, messages, self.encoded), self.sink)
        return self.checked(reply, local_prompt_tokens)

    def calling(self, messages: Sequence[Message], local_prompt_tokens: int | None) -> None:
        """Count a call about to be sent (and tell `on_call` its view)."""
        if self.on_call is not None:
            self.on_call(messages, local_prompt_tokens or 0)
        self.calls += 1
        self.failure = None  # what the client gets if this call's error ends the request

    def checked(self, reply: ModelReply, local_prompt_tokens: int | None) -> ModelReply:
        """`reply`, unless the upstream cut the prompt unasked (see the module docs)."""
        try:
            return reject_truncated(reply, local_prompt_tokens, self.spec)
        except ContextOverflowError as truncated:
            if self.sink is None:
                raise
            raise TruncatedStreamError(
                f"the reply already streamed was not recorded: {truncated}"
            ) from truncated

    async def _single(self, body: bytes) -> ModelReply:
        headers = {**self.headers, "content-type": "application/json"}
        response = await self.client.post("chat/completions", content=body, headers=headers)
        if response.status_code != 200:
            raise self._refused(response.status_code, response.content, response.headers)
        data = response.json()
        self.response, self.content = data, response.content
        choice = (data.get("choices") or [{}])[0]
        message = from_openai([choice.get("message") or {"role": "assistant", "content": ""}])[0]
        return ModelReply(
            message=message,
            usage=Usage.from_openai(data.get("usage")),
            finish_reason=choice.get("finish_reason"),
            model=data.get("model"),
            raw=data,
        )

    async def _streamed(self, body: bytes, sink: Callable[[bytes], None]) -> ModelReply:
        self._assembly = _StreamAssembly()
        headers = {**self.headers, "content-type": "application/json"}
        request = self.client.build_request("POST", "chat/completions", content=body, headers=headers)
        response = await self.client.send(request, stream=True)
        try:
            if response.status_code != 200:
                raise self._refused(response.status_code, await response.aread(), response.headers)
            started = False
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                chunk = None if payload == "[DONE]" else json.loads(payload, object_hook=_Attrs)
                if not started:
                    if chunk is not None and "error" in chunk:  # an error sent inside a 200 stream
                        raise self._refused(200, payload.encode(), response.headers)
                    sink(STARTED)
                    started = True
                if chunk is None:
                    continue  # [DONE] is sent by the proxy once the reply is recorded
                self._assembly.add(chunk)
                if self.include_usage or chunk.get("choices"):  # no usage-only chunk unless asked for
                    sink(f"data: {payload}\n\n".encode())
        finally:
            await response.aclose()
        return self._assembly.reply()

    def _refused(self, status: int, content: bytes, headers: httpx.Headers) -> Exception:
        # Kept even for an overflow: if recovery gives up, the client gets the upstream's answer.
        self.failure = UpstreamFailure(status, content, headers.get("content-type", "application/json"))
        overflow = classify_error(status, content.decode("utf-8", errors="replace"))
        if overflow is not None:
            logger.info("upstream overflow (%s): %s", overflow.phase.value, overflow)
            return overflow
        return UpstreamError(f"upstream answered {status}")
