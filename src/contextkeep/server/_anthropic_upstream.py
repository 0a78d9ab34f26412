"""The proxy's model adapter for an Anthropic Messages upstream (`POST {upstream}/messages`).

It is :class:`~contextkeep.server.upstream.UpstreamAdapter` speaking the Messages API: the
view goes out through `to_anthropic` (thinking blocks with their text and signature as
recorded, tool_use/tool_result pairs), the request's other fields (`thinking`,
`tool_choice`, `temperature`, …) and its tools as the client sent them. Refusals are
classified and kept exactly as the parent does. Streamed, each upstream event is forwarded
to the sink as it arrives (named, as the Messages API sends it) and the reply is assembled
from the events to be recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from contextkeep._formats.anthropic import AnthropicAssembly, from_anthropic, message_blocks, to_anthropic
from contextkeep._messages import Message
from contextkeep._usage import Usage
from contextkeep.models.adapter import ModelReply
from contextkeep.server._client_marks import ClientMarks, apply_marks
from contextkeep.server.upstream import STARTED, UpstreamAdapter, call_body

__all__ = ["AnthropicUpstream", "StablePrefix", "StreamedMessage"]

_DELTA_FIELDS = {"text_delta": "text", "thinking_delta": "thinking"}
_BREAKPOINTS: Final = 4
"""The `cache_control` markers the Messages API allows in one request."""
_UNMARKABLE: Final = frozenset({"thinking", "redacted_thinking"})
_EPHEMERAL: Final = {"type": "ephemeral"}


class StablePrefix:
    """What one conversation last sent upstream, to mark where the unchanged part of its view ends.

    The view is compared message by message with the previous call's; the last message they
    share gets a `cache_control` breakpoint, so the upstream caches the prefix that the next
    call will send again (the compacted view changes only where compaction acted).
    """

    def __init__(self) -> None:
        self._sent: list[str] = []

    def mark(
        self, messages: list[dict[str, Any]], taken: int, marked: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """`marked` (default: `messages`) with a breakpoint on the stable prefix's last message.

        Unless `taken` leaves none. The prefix is that of `messages`, without the client's own
        marks (which move from call to call); a block the client marked keeps its own.
        """
        encoded = [json.dumps(m, sort_keys=True) for m in messages]
        same = next((i for i, (a, b) in enumerate(zip(self._sent, encoded, strict=False)) if a != b), None)
        if same is None:
            same = min(len(self._sent), len(encoded))
        self._sent = encoded
        out = messages if marked is None else marked
        if same == 0 or taken >= _BREAKPOINTS:
            return out
        out = list(out)
        out[same - 1] = _with_breakpoint(out[same - 1])
        return out


def _with_breakpoint(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        if not content:
            return message
        return {**message, "content": [{"type": "text", "text": content, "cache_control": _EPHEMERAL}]}
    for i in range(len(content) - 1, -1, -1):
        block = content[i]
        if block.get("type") in _UNMARKABLE or (block.get("type") == "text" and not block.get("text")):
            continue
        if "cache_control" in block:  # the client's own breakpoint is there already
            return message
        marked = [*content[:i], {**block, "cache_control": _EPHEMERAL}, *content[i + 1 :]]
        return {**message, "content": marked}
    return message


def _breakpoints(value: Any) -> int:
    """The `cache_control` markers in a request part (the client's own)."""
    if isinstance(value, dict):
        return int("cache_control" in value) + sum(_breakpoints(v) for v in value.values())
    if isinstance(value, list):
        return sum(_breakpoints(v) for v in value)
    return 0


class StreamedMessage:
    """A Messages API reply put together from its stream events."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {"role": "assistant", "content": [], "usage": {}}
        self._partial_json: dict[int, str] = {}

    def add(self, event: Mapping[str, Any]) -> None:
        """Take one event's payload into the reply."""
        kind = event.get("type")
        if kind == "message_start":
            self.message = {
                **event["message"],
                "content": [],
                "usage": dict(event["message"].get("usage") or {}),
            }
        elif kind == "content_block_start":
            self.message["content"].append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            self._delta(event["index"], event["delta"])
        elif kind == "content_block_stop":
            block = self.message["content"][event["index"]]
            partial = self._partial_json.pop(event["index"], None)
            if block.get("type") == "tool_use" and partial is not None:
                block["input"] = json.loads(partial) if partial.strip() else {}
        elif kind == "message_delta":
            self.message.update(event.get("delta") or {})
            self.message["usage"].update(event.get("usage") or {})

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        block = self.message["content"][index]
        kind = delta.get("type")
        if kind in _DELTA_FIELDS:
            name = _DELTA_FIELDS[kind]
            block[name] = block.get(name, "") + delta[name]
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta["signature"]
        elif kind == "input_json_delta":
            self._partial_json[index] = self._partial_json.get(index, "") + delta["partial_json"]


def parsed_reply(data: Mapping[str, Any]) -> ModelReply:
    """A Messages API `message` object as a model reply."""
    [message] = from_anthropic([{"role": "assistant", "content": data.get("content") or []}])
    return ModelReply(
        message=message,
        usage=Usage.from_anthropic(data.get("usage")),
        finish_reason=data.get("stop_reason"),
        model=data.get("model"),
        raw=data,
    )


@dataclass
class AnthropicUpstream(UpstreamAdapter):
    """Sends views to an Anthropic Messages upstream for one proxied request."""

    prefix: StablePrefix | None = None
    """The conversation's previous view, for the `cache_control` breakpoint (None: none placed)."""
    system_blocks: list[dict[str, Any]] | None = None
    """The client's `system` blocks, sent as they are (their breakpoints kept) while the view's matches."""
    client_marks: ClientMarks | None = None
    """The client's breakpoints on its messages, put back where the view leaves those unchanged."""

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        local_prompt_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        """Send `messages` with the request's other fields; errors as `UpstreamAdapter.complete`."""
        system, api_messages = to_anthropic(messages)
        body = call_body(
            options,
            tools,
            ("max_tokens", max_tokens),
            system=None if system is None else self._system(system),
        )
        taken = _breakpoints(body.get("system")) + _breakpoints(body.get("tools"))
        marked, used = self._client_marked(messages, api_messages, _BREAKPOINTS - taken)
        body["messages"] = (
            marked if self.prefix is None else self.prefix.mark(api_messages, taken + used, marked)
        )
        self.calling(messages, local_prompt_tokens)
        if self.sink is None:
            reply = await self._one(body)
        else:
            reply = await self._events({**body, "stream": True}, self.sink)
        return self.checked(reply, local_prompt_tokens)

    def _client_marked(
        self, view: Sequence[Message], api_messages: list[dict[str, Any]], room: int
    ) -> tuple[list[dict[str, Any]], int]:
        """The view's API messages with the client's marks where it left their messages unchanged."""
        chosen = apply_marks(view, self.client_marks, room) if self.client_marks and room > 0 else {}
        if not chosen:
            return api_messages, 0
        assembly = AnthropicAssembly()
        for position, m in enumerate(view):
            marks = chosen.get(position)
            if marks is None or m.role == "system":
                assembly.add(m)
                continue
            blocks = message_blocks(m)
            for index, control in marks:
                blocks[index] = {**blocks[index], "cache_control": control}
            assembly.add(m, blocks)
        return assembly.result()[1], sum(map(len, chosen.values()))

    def _system(self, system: str) -> str | list[dict[str, Any]]:
        blocks = self.system_blocks
        if blocks is not None and system == "\n\n".join(str(b.get("text", "")) for b in blocks):
            return blocks
        return system

    async def _one(self, body: Mapping[str, Any]) -> ModelReply:
        headers = {**self.headers, "content-type": "application/json"}
        response = await self.client.post("messages", content=json.dumps(body).encode(), headers=headers)
        if response.status_code != 200:
            raise self._refused(response.status_code, response.content, response.headers)
        self.response = response.json()
        return parsed_reply(self.response)

    async def _events(self, body: Mapping[str, Any], sink: Callable[[bytes], None]) -> ModelReply:
        headers = {**self.headers, "content-type": "application/json"}
        request = self.client.build_request(
            "POST", "messages", content=json.dumps(body).encode(), headers=headers
        )
        response = await self.client.send(request, stream=True)
        assembly = StreamedMessage()
        try:
            if response.status_code != 200:
                raise self._refused(response.status_code, await response.aread(), response.headers)
            started, name = False, ""
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    name = line[6:].strip()
                    continue
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if name == "error" and not started:  # the client gets it as the upstream's refusal
                    raise self._refused(200, payload.encode(), response.headers)
                if not started:
                    sink(STARTED)
                    started = True
                sink(f"event: {name}\ndata: {payload}\n\n".encode())
                if name == "error":  # mid-stream: the client has it; the partial reply is not recorded
                    raise self._refused(200, payload.encode(), response.headers)
                assembly.add(json.loads(payload))
        finally:
            await response.aclose()
        return parsed_reply(assembly.message)
