"""`/v1/messages` on an OpenAI-compatible upstream: the Messages API restated as chat completions.

The view goes out as chat messages (the parent :class:`UpstreamAdapter`), the request's
Anthropic `tools`, `tool_choice` and `stop_sequences` as their chat equivalents; fields
a chat upstream has no use for (`thinking`, `metadata`, `top_k`, `cache_control`…) are
dropped. The reply comes back as a Messages API `message` (blocks from `message_blocks`),
or streamed as Messages events as the chunks arrive: reasoning as `thinking_delta`s, text
as `text_delta`s, each tool call's arguments as `input_json_delta`s (a call's block stays
open until the end, so calls whose pieces interleave still land in their own block), then
`message_delta` with the stop reason and usage, `message_stop`.

Which API the upstream speaks is the server's `upstream_api` setting; `auto` asks once per
proxy: an empty `POST messages` that an Anthropic upstream refuses in its own error shape
(400, nothing billed) and a chat-only one answers 404.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from contextkeep._errors import ContextKeepError
from contextkeep._formats.anthropic import message_blocks
from contextkeep._messages import Message
from contextkeep.models.adapter import ModelReply
from contextkeep.server._call_pieces import CallPiece, CallPieces
from contextkeep.server._probe import has_endpoint
from contextkeep.server.proxy import Proxy
from contextkeep.server.upstream import STARTED, UpstreamAdapter

__all__ = ["ChatForMessages", "anthropic_error_event", "speaks_messages"]

logger = logging.getLogger("contextkeep.server")

_STOP_REASONS = {"tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens"}
_CHAT_OPTIONS = ("stream", "temperature", "top_p", "user")


async def speaks_messages(proxy: Proxy, headers: Mapping[str, str], setting: str = "auto") -> bool:
    """Whether the upstream has the Messages API: the setting, or (`auto`) asked once (yes if unreachable)."""
    if setting != "auto":
        return setting == "anthropic"
    return await has_endpoint(proxy, headers, "messages", _anthropic_refusal, unreachable=True)


def _anthropic_refusal(answer: httpx.Response) -> bool:
    """An error in the Messages API's own shape (a chat-only server answers 404 its own way)."""
    try:
        body = answer.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("type") == "error"


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
    _blocks_sent: int = 0
    _open: dict[str, int] = field(default_factory=dict)
    """The blocks streaming, by key (`thinking <n>`, `text <n>`, `call <n>`), with their index."""
    _last: str | None = None
    """The block opened last."""
    _kinds: set[str] = field(default_factory=set)
    """The kinds of the blocks streamed (`thinking`, `text`, `call`)."""
    _call_ids: set[str] = field(default_factory=set)
    _calls: CallPieces = field(default_factory=CallPieces)

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
            delta = choices[0].get("delta") or {}
            if delta.get("reasoning_content"):
                opening = {"type": "thinking", "thinking": "", "signature": ""}
                self._piece(
                    out,
                    "thinking",
                    opening,
                    {"type": "thinking_delta", "thinking": delta["reasoning_content"]},
                )
            if delta.get("content"):
                opening = {"type": "text", "text": ""}
                self._piece(out, "text", opening, {"type": "text_delta", "text": delta["content"]})
            for entry in delta.get("tool_calls") or ():
                self._call_piece(out, self._calls.read(entry))

        return sink

    def _piece(
        self, out: Callable[[bytes], None], kind: str, opening: dict[str, Any], delta: dict[str, Any]
    ) -> None:
        """Forward a thinking or text delta: into the block of its kind streaming last, else a new one."""
        if self._last is None or not self._last.startswith(kind):
            self._start(out, f"{kind} {self._blocks_sent}", opening)
        assert self._last is not None
        self._event(out, "content_block_delta", index=self._open[self._last], delta=delta)

    def _call_piece(self, out: Callable[[bytes], None], piece: CallPiece) -> None:
        key = f"call {piece.position}"
        if piece.opens and piece.id is not None:
            self._call_ids.add(piece.id)
            self._start(out, key, {"type": "tool_use", "id": piece.id, "name": piece.name, "input": {}})
        if piece.arguments and key in self._open:  # a call's block stays open: its pieces may interleave
            delta = {"type": "input_json_delta", "partial_json": piece.arguments}
            self._event(out, "content_block_delta", index=self._open[key], delta=delta)

    def _start(self, out: Callable[[bytes], None], key: str, opening: dict[str, Any]) -> None:
        """Open block `key`, after closing any thinking or text block (those end when another begins)."""
        for name in [k for k in self._open if not k.startswith("call")]:
            self._event(out, "content_block_stop", index=self._open.pop(name))
        self._open[key] = self._blocks_sent
        self._blocks_sent += 1
        self._last = key
        self._kinds.add(key.split(maxsplit=1)[0])
        self._event(out, "content_block_start", index=self._open[key], content_block=opening)

    def _finish(self, out: Callable[[bytes], None], message: Mapping[str, Any]) -> None:
        for index in sorted(self._open.values()):
            self._event(out, "content_block_stop", index=index)
        self._open.clear()
        for block in message["content"]:  # what did not come as deltas (a call without an id) comes whole
            kind = block["type"]
            if block.get("id") in self._call_ids or (kind != "tool_use" and kind in self._kinds):
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
