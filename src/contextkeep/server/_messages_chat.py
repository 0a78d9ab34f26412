"""`/v1/messages` on an OpenAI-compatible upstream: the Messages API restated as chat completions.

The view goes out as chat messages (the parent :class:`UpstreamAdapter`), the request's
Anthropic `tools`, `tool_choice` and `stop_sequences` as their chat equivalents; fields
a chat upstream has no use for (`thinking`, `metadata`, `top_k`, `cache_control`…) are
dropped. The reply comes back as a Messages API `message` (blocks from `message_blocks`),
or streamed as Messages events: text deltas as they arrive, then each other block whole,
`message_delta` with the stop reason and usage, `message_stop`.

Which API the upstream speaks is asked once per proxy: an empty `POST messages` that an
Anthropic upstream refuses in its own error shape (400, nothing billed) and a chat-only
one answers 404.
"""

from __future__ import annotations

import json
import logging
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from contextkeep._errors import ContextKeepError
from contextkeep._formats.anthropic import message_blocks
from contextkeep._messages import Message
from contextkeep.models.adapter import ModelReply
from contextkeep.server.proxy import Proxy
from contextkeep.server.upstream import STARTED, UpstreamAdapter

__all__ = ["ChatForMessages", "anthropic_error_event", "speaks_messages"]

logger = logging.getLogger("contextkeep.server")

_STOP_REASONS = {"tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens"}
_CHAT_OPTIONS = ("stream", "temperature", "top_p", "user")
_SPEAKS: weakref.WeakKeyDictionary[Proxy, bool] = weakref.WeakKeyDictionary()


async def speaks_messages(proxy: Proxy, headers: Mapping[str, str]) -> bool:
    """Whether the upstream has the Messages API (asked once; assumed, unasked, when unreachable)."""
    known = _SPEAKS.get(proxy)
    if known is not None:
        return known
    try:
        answer = await proxy.client.post(
            "messages", content=b"{}", headers={**headers, "content-type": "application/json"}
        )
    except httpx.HTTPError as exc:
        logger.info("could not ask the upstream whether it speaks the Messages API: %s", exc)
        return True
    try:
        body = answer.json()
    except ValueError:
        body = None
    speaks = isinstance(body, dict) and body.get("type") == "error"
    _SPEAKS[proxy] = speaks
    if not speaks:
        logger.info(
            "the upstream has no Messages API (%d): /v1/messages goes to its chat completions",
            answer.status_code,
        )
    return speaks


def anthropic_error_event(exc: Exception) -> bytes:
    """A failure after the stream started, as an event in the shape the Messages API sends one."""
    message = str(exc) if isinstance(exc, ContextKeepError) else f"the upstream stream broke: {exc}"
    error = {"type": "error", "error": {"type": "api_error", "message": message}}
    return f"event: error\ndata: {json.dumps(error)}\n\n".encode()


def _chat_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.get("name"),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for t in tools
    ]


def _tool_choice(choice: Mapping[str, Any]) -> Any:
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return {"any": "required", "none": "none"}.get(str(kind), "auto")


def _chat_options(options: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: options[k] for k in _CHAT_OPTIONS if k in options}
    out["model"] = options.get("model")
    if isinstance(options.get("tool_choice"), Mapping):
        out["tool_choice"] = _tool_choice(options["tool_choice"])
    if options.get("stop_sequences"):
        out["stop"] = list(options["stop_sequences"])
    return out


def _blocks(message: Message) -> list[dict[str, Any]]:
    blocks = message_blocks(message)
    for b in blocks:
        if b["type"] == "thinking":
            b.setdefault("signature", "")  # a chat upstream signs nothing; the SDK's type wants the field
    return blocks


@dataclass
class ChatForMessages(UpstreamAdapter):
    """The chat upstream adapter answering a Messages API client."""

    model: str = ""
    """The model the client named (echoed when the upstream names none)."""
    message: dict[str, Any] | None = None
    """The latest reply as a Messages API `message`."""
    _id: str = field(default_factory=lambda: f"msg_{uuid.uuid4().hex}")
    _text: int | None = None
    _blocks_sent: int = 0

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        local_prompt_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        """As `UpstreamAdapter.complete`, the Anthropic fields restated; streamed, events restated."""
        out = self.sink
        if out is not None:
            self.sink = self._translating(out)
        try:
            reply = await super().complete(
                messages,
                tools=_chat_tools(tools) if tools else None,
                max_tokens=max_tokens,
                local_prompt_tokens=local_prompt_tokens,
                **_chat_options({**options, "model": options.get("model", self.model)}),
            )
        finally:
            self.sink = out
        self.message = self._message(reply)
        if out is not None:
            self._finish(out, self.message)
        return reply

    def _message(self, reply: ModelReply) -> dict[str, Any]:
        usage = {
            "input_tokens": reply.usage.input_tokens or 0,
            "output_tokens": reply.usage.output_tokens or 0,
        }
        return {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": reply.model or self.model,
            "content": _blocks(reply.message),
            "stop_reason": _STOP_REASONS.get(reply.finish_reason or "", "end_turn"),
            "stop_sequence": None,
            "usage": usage,
        }

    @staticmethod
    def _event(out: Callable[[bytes], None], kind: str, **payload: Any) -> None:
        out(f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n".encode())

    def _translating(self, out: Callable[[bytes], None]) -> Callable[[bytes], None]:
        def sink(chunk: bytes) -> None:
            if chunk == STARTED:
                out(STARTED)
                start: dict[str, Any] = {
                    "id": self._id,
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                }
                self._event(out, "message_start", message=start)
                return
            choices = json.loads(chunk[len(b"data: ") :]).get("choices") or [{}]
            text = (choices[0].get("delta") or {}).get("content")
            if not text:
                return
            if self._text is None:
                self._text = self._blocks_sent
                self._blocks_sent += 1
                block = {"type": "text", "text": ""}
                self._event(out, "content_block_start", index=self._text, content_block=block)
            delta = {"type": "text_delta", "text": text}
            self._event(out, "content_block_delta", index=self._text, delta=delta)

        return sink

    def _finish(self, out: Callable[[bytes], None], message: Mapping[str, Any]) -> None:
        if self._text is not None:
            self._event(out, "content_block_stop", index=self._text)
        for block in message["content"]:
            if block["type"] == "text" and self._text is not None:
                continue
            index = self._blocks_sent
            self._blocks_sent += 1
            self._event(out, "content_block_start", index=index, content_block=_opening(block))
            delta = _whole_delta(block)
            if delta is not None:
                self._event(out, "content_block_delta", index=index, delta=delta)
            self._event(out, "content_block_stop", index=index)
        done = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        self._event(out, "message_delta", delta=done, usage=message["usage"])
        self._event(out, "message_stop")


def _opening(block: Mapping[str, Any]) -> dict[str, Any]:
    """A block as `content_block_start` opens it (its content follows as one delta)."""
    if block["type"] == "tool_use":
        return {**block, "input": {}}
    if block["type"] == "thinking":
        return {**block, "thinking": ""}
    if block["type"] == "text":
        return {**block, "text": ""}
    return dict(block)


def _whole_delta(block: Mapping[str, Any]) -> dict[str, Any] | None:
    if block["type"] == "tool_use":
        return {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    if block["type"] == "thinking":
        return {"type": "thinking_delta", "thinking": block["thinking"]}
    if block["type"] == "text":
        return {"type": "text_delta", "text": block["text"]}
    return None
