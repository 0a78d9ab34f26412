"""What happens to messages on their way into a session: normalising input, and offloading at ingest.

Everything layer 0 or 1 may later shorten is offloaded, so every reference a view shows exists by
the time the view does. A long tool result's copy is written after its append won, in the
background (:mod:`contextkeep._offload._background`); media and a user's offloader are offloaded
before the message is stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from contextkeep._compaction.builder import REF_KEY
from contextkeep._config import ContextConfig
from contextkeep._events import ContextOffloaded, Event, ToolResultTruncated
from contextkeep._formats.openai import from_openai
from contextkeep._messages import ContentPart, ImagePart, Message, TextPart
from contextkeep._offload._background import Copy, PendingCopies, deferrable
from contextkeep._offload.workspace import Workspace
from contextkeep._tokens import TokenCounter
from contextkeep._usage import Usage
from contextkeep._validation import data_url_bytes
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
        self._copies = PendingCopies(workspace) if deferrable(workspace) else None
        self._copied = f"{workspace.session_dir(conversation_id)}/tool_result-"

    async def message(self, m: Message, answered: set[str]) -> Message:
        """`m` with offload references in its metadata; `answered` holds call ids that have a result.

        Called inside an append attempt: the copy of a long tool result is not written here
        (`stored` queues it once the append won), unless a user's offloader makes the reference.
        """
        name = None
        if m.role == "tool" and m.tool_call_id:
            # Providers reuse call ids across rounds: a recurring id gets the message id too. Both
            # are the store's (the attempt runs on top of exactly what it holds), so the name is unique.
            name = m.tool_call_id if m.tool_call_id not in answered else f"{m.tool_call_id}.{m.id}"
            answered.add(m.tool_call_id)
        if name and len(m.text) > self.config.truncated_observation_max_chars:
            if self._copies is not None:
                ref = self.workspace.tool_result_ref(self.conversation_id, name)
            else:
                ref = await self.workspace.offload_tool_result(self.conversation_id, name, m.text)
            m = m.with_metadata(**{REF_KEY: ref})
            # Stamped here, as the emitter would (it then hands the event on without copying it).
            self.emit(
                ContextOffloaded(
                    conversation_id=self.conversation_id, reference=ref, kind="tool_result", messages=1
                )
            )
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
        return m

    def stored(self, messages: Sequence[Message]) -> None:
        """Queue the copies of the tool results an append of this instance just stored."""
        self._queue(messages, check=False)

    def loaded(self, messages: Sequence[Message]) -> None:
        """Queue checked copies of tool results loaded from the store: their writer may have crashed."""
        self._queue(messages, check=True)

    async def flush(self) -> None:
        """Wait until every queued copy is written (before a view or state shows its reference)."""
        if self._copies is not None:
            await self._copies.flush()

    def _queue(self, messages: Sequence[Message], *, check: bool) -> None:
        if self._copies is None or not messages:  # a load that found nothing new: the usual case
            return
        # Stored here: exactly what `message` offloaded. Loaded: whatever names a copy of ours.
        limit = 0 if check else self.config.truncated_observation_max_chars
        self._copies.add(
            Copy(ref, m.text, check)
            for m in messages
            if m.role == "tool"
            and len(m.text) > limit
            and isinstance(ref := m.metadata.get(REF_KEY), str)
            and ref.startswith(self._copied)
        )

    async def _part(self, part: ContentPart) -> ContentPart:
        if isinstance(part, TextPart) or not part.url.startswith("data:") or ";base64," not in part.url:
            return part
        head, data = data_url_bytes(part.url)
        ref = await self.workspace.offload_data(data, head.rsplit("/", 1)[-1] or "bin")
        self.emit(ContextOffloaded(reference=ref, kind="data", messages=0))
        extra = {**part.extra, REF_KEY: ref}
        if isinstance(part, ImagePart):
            return ImagePart(part.url, part.media_type, extra)
        return type(part)(part.url, part.media_type, part.name, extra)
