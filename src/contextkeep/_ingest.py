"""What happens to messages on their way into a session: normalising input, and offloading at ingest.

Everything layer 0 or 1 may later shorten is offloaded before it is stored, so every reference a
view shows exists by the time the view does.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from contextkeep._compaction.builder import REF_KEY
from contextkeep._config import ContextConfig
from contextkeep._events import ContextOffloaded, Event, ToolResultTruncated
from contextkeep._formats.openai import from_openai
from contextkeep._messages import ContentPart, ImagePart, Message, TextPart, message_json
from contextkeep._offload.workspace import Workspace
from contextkeep._tokens import TokenCounter
from contextkeep._usage import Usage
from contextkeep.models.adapter import ModelReply

__all__ = ["Ingest", "as_messages", "reply_message"]


def as_messages(
    messages: Iterable[Message | Mapping[str, Any]] | Message | Mapping[str, Any],
) -> list[Message]:
    """One message or many, as `Message`s (OpenAI dicts are converted)."""
    items: Iterable[Message | Mapping[str, Any]] = (
        [messages] if isinstance(messages, Message | Mapping) else messages
    )
    return [item if isinstance(item, Message) else from_openai([item])[0] for item in items]


def reply_message(reply: Any) -> tuple[Message, Usage | None]:
    """The assistant message and usage of a `ModelReply`, `Message`, OpenAI dict or SDK response."""
    if isinstance(reply, ModelReply):
        return reply.message, reply.usage
    if isinstance(reply, Message):
        return reply, None
    if isinstance(reply, Mapping):
        if "choices" in reply:
            return from_openai([reply["choices"][0]["message"]])[0], Usage.from_openai(reply.get("usage"))
        return from_openai([reply])[0], None
    dump = getattr(reply, "model_dump", None)
    if callable(dump):  # an SDK response object
        return reply_message(dump(exclude_none=True))
    raise TypeError(f"cannot record a reply of type {type(reply).__name__}")


class Ingest:
    """Offloads one conversation's long tool results and inline media as they arrive."""

    def __init__(
        self,
        workspace: Workspace,
        conversation_id: str,
        config: ContextConfig,
        counter: TokenCounter,
        derive: Callable[[Message], Message],
        emit: Callable[[Event], None],
    ) -> None:
        self.workspace = workspace
        self.conversation_id = conversation_id
        self.config = config
        self.counter = counter
        self.derive = derive
        self.emit = emit

    async def message(self, m: Message, answered: set[str]) -> Message:
        """`m` with offload references in its metadata; `answered` holds call ids that have a result."""
        name = None
        if m.role == "tool" and m.tool_call_id:
            # Providers reuse call ids across rounds: a recurring id gets the message id too.
            name = m.tool_call_id if m.tool_call_id not in answered else f"{m.tool_call_id}.{m.id}"
            answered.add(m.tool_call_id)
        if name and len(m.text) > self.config.truncated_observation_max_chars:
            ref = await self.workspace.offload_tool_result(self.conversation_id, name, m.text)
            m = m.with_metadata(**{REF_KEY: ref})
            self.emit(ContextOffloaded(reference=ref, kind="tool_result", messages=1))
            derived = self.derive(m)  # layer 0 (its limit may be capped by the window) or `m` itself
            if derived.text != m.text:
                self.emit(
                    ToolResultTruncated(
                        tool_call_id=m.tool_call_id or "",
                        tokens_before=self.counter.count_text(m.text),
                        tokens_after=self.counter.count_text(derived.text),
                        reference=ref,
                    )
                )
        if m.media and not isinstance(m.content, str) and m.content is not None:
            parts = tuple([await self._part(p) for p in m.content])
            m = Message(
                m.role, parts, m.tool_calls, m.tool_call_id, m.name, m.reasoning, m.id, m.metadata, m.extra
            )
        message_json(m)  # serialised once, as it arrives: the store and any later offload reuse it
        return m

    async def _part(self, part: ContentPart) -> ContentPart:
        if isinstance(part, TextPart) or not part.url.startswith("data:") or ";base64," not in part.url:
            return part
        head, data = part.url[5:].split(";base64,", 1)
        ref = await self.workspace.offload_data(base64.b64decode(data), head.rsplit("/", 1)[-1] or "bin")
        self.emit(ContextOffloaded(reference=ref, kind="data", messages=0))
        extra = {**part.extra, REF_KEY: ref}
        if isinstance(part, ImagePart):
            return ImagePart(part.url, part.media_type, extra)
        return type(part)(part.url, part.media_type, part.name, extra)
