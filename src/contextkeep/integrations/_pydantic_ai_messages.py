"""pydantic-ai messages ⇄ neutral messages, for `contextkeep.integrations.pydantic_ai`.

A `ModelResponse` is one assistant message (its text, thinking and tool calls); each part of a
`ModelRequest` that the model reads as a message (a system or user prompt, a tool return, a
retry prompt) is one message of its own. Each neutral message keeps its :class:`Origin`: the
pydantic-ai message and part it came from. Parts contextkeep does not model (instruction and
tool-availability deltas, compaction or speech parts, native tool calls) are not counted; they
travel with the request or response that holds them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from operator import attrgetter, ne
from typing import Any

from pydantic_ai.messages import (
    BaseToolReturnPart,
    BinaryContent,
    CachePoint,
    FileUrl,
    ImageUrl,
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.usage import RequestUsage

from contextkeep import _messages as ck
from contextkeep._usage import Usage
from contextkeep.integrations._bridge import common_prefix

__all__ = ["Converter", "Origin", "instructions_of", "reply_message", "tool_dicts", "usage_of"]


@dataclass(frozen=True, slots=True)
class Origin:
    """The pydantic-ai message (and, in a request, the part) a neutral message came from."""

    message: ModelMessage
    """The `ModelRequest` or `ModelResponse`."""
    part: int = -1
    """The index of the part in `ModelRequest.parts`; -1 for a response."""
    read: int = 1
    """How many neutral messages its message made (the request's parts the model reads)."""


Converted = list[tuple[ck.Message, Origin]]
"""Neutral messages, each with its origin."""


Mapped = list[tuple[ck.Message, Origin | None]]
"""View messages, each with its origin (None where the view changed or made it)."""


class Converter:
    """Converts a history and maps views back, each object once while the conversation shows it.

    Within a run, pydantic-ai hands over the same message objects again, then the new ones: the
    messages (and their parts lists, of the same lengths) the last history began with keep their
    conversion (compared in C), and only what follows is looked up, or converted. Views keep their
    messages as the same objects too: the requests and responses made for the groups the last
    view began with are reused, and a masked message's request is made once while it shows.
    """

    def __init__(self) -> None:
        self.conversions = 0
        """History messages converted so far (new ones, or ones whose parts changed)."""
        self._history: list[ModelMessage] = []
        self._parts: list[Sequence[Any]] = []
        self._sizes: list[int] = []
        self._ends: list[int] = []
        """Per message of `_history`: the index after its last neutral message in `_out`."""
        self._out: Converted = []
        self._seen: dict[int, tuple[ModelMessage, Sequence[Any], int, Converted]] = {}
        """Messages converted, by identity: one found at another place (a history processor
        trimmed the front) is not converted again. Pruned to the history's when twice as long."""
        self._pairs: Mapped = []
        """The last view mapped; per group of it (below): the index after its last pair, its message,
        and its key in `_made` (None for the history's own message)."""
        self._group_ends: list[int] = []
        self._messages: list[ModelMessage] = []
        self._keys: list[tuple[int, ...] | None] = []
        self._made: dict[tuple[int, ...], tuple[Mapped, ModelMessage]] = {}

    def convert(self, history: Sequence[ModelMessage]) -> Converted:
        """The neutral messages of `history`, in order, each with its origin."""
        parts = list(map(_PARTS, history))
        sizes = list(map(len, parts))
        keep = min(
            common_prefix(self._history, history),
            common_prefix(self._parts, parts),
            common_prefix(self._sizes, sizes, ne),  # parts added to a message in place
        )
        out = self._out[: self._ends[keep - 1] if keep else 0]
        ends = self._ends[:keep]
        seen = self._seen
        for message, message_parts in zip(
            islice(history, keep, None), islice(parts, keep, None), strict=True
        ):
            hit = seen.get(id(message))
            if (
                hit is None
                or hit[0] is not message
                or hit[1] is not message_parts
                or hit[2] != len(message_parts)
            ):
                hit = seen[id(message)] = (message, message_parts, len(message_parts), _convert(message))
                self.conversions += 1
            out.extend(hit[3])
            ends.append(len(out))
        if len(seen) > 2 * len(history) + 16:  # forget what older histories held (amortised)
            starts = [0, *ends[:-1]]
            self._seen = {
                id(m): (m, p, len(p), out[a:b])
                for m, p, a, b in zip(history, parts, starts, ends, strict=True)
            }
        self._history, self._parts, self._sizes, self._ends, self._out = (
            list(history),
            parts,
            sizes,
            ends,
            out,
        )
        return list(out)

    def from_view(self, view: Iterable[tuple[ck.Message, Origin | None]]) -> list[ModelMessage]:
        """pydantic-ai messages for a view: the original objects where it left them as they were.

        Consecutive non-assistant messages make one request: the original request when they are
        exactly its parts, else a copy of their first request holding the parts the view keeps
        (with that request's unmodelled parts), new parts where the view changed or made a message.
        """
        pairs = list(view)
        # The groups that end before the first pair the view changed are the last view's.
        kept = bisect_left(self._group_ends, common_prefix(self._pairs, pairs))
        ends, messages, keys = self._group_ends[:kept], self._messages[:kept], self._keys[:kept]
        stale = set(self._keys[kept:])
        for end, group in _grouped(pairs, ends[-1] if ends else 0):
            message, key = self._message(group)
            ends.append(end)
            messages.append(message)
            keys.append(key)
            stale.discard(key)
        for key in stale - {None}:
            self._made.pop(key, None)  # type: ignore[arg-type]
        self._pairs, self._group_ends, self._messages, self._keys = pairs, ends, messages, keys
        return list(messages)

    def _message(self, group: Mapped) -> tuple[ModelMessage, tuple[int, ...] | None]:
        """The message for one group, and its key in `_made` when it was made for the view."""
        message, origin = group[0]
        if message.role == "assistant" and origin is not None:
            return origin.message, None
        unchanged = _unchanged(group)
        if unchanged is not None:
            return unchanged, None
        key = tuple(id(x) for pair in group for x in pair)
        hit = self._made.get(key)
        if hit is None or any(
            a[0] is not b[0] or a[1] is not b[1] for a, b in zip(hit[0], group, strict=True)
        ):
            hit = self._made[key] = (
                group,
                _new_response(message) if message.role == "assistant" else _request(group),
            )
        return hit[1], key


_PARTS = attrgetter("parts")


def _grouped(view: Sequence[tuple[ck.Message, Origin | None]], start: int) -> list[tuple[int, Mapped]]:
    """`view[start:]` as requests (runs of non-assistant messages) and responses (one each).

    Each group comes with the index in `view` after its last message.
    """
    groups: list[Mapped] = []
    ends: list[int] = []
    for i in range(start, len(view)):
        pair = view[i]
        if pair[0].role != "assistant" and groups and groups[-1][0][0].role != "assistant":
            groups[-1].append(pair)
            ends[-1] = i + 1
        else:
            groups.append([pair])
            ends.append(i + 1)
    return list(zip(ends, groups, strict=True))


def _convert(message: ModelMessage) -> Converted:
    if isinstance(message, ModelResponse):
        return [(reply_message(message), Origin(message))]
    read = [(i, m) for i, m in enumerate(map(_request_part, message.parts)) if m is not None]
    return [(m, Origin(message, i, len(read))) for i, m in read]


_READ = (SystemPromptPart, UserPromptPart, BaseToolReturnPart, RetryPromptPart, RetryFeedbackPart)
"""The request parts the model reads as messages of their own (`_request_part` converts them)."""


def _request_part(part: ModelRequestPart) -> ck.Message | None:
    """The neutral message of one request part (None for parts the model does not read as one)."""
    if isinstance(part, SystemPromptPart):
        return ck.Message("system", part.content)
    if isinstance(part, UserPromptPart):
        return ck.Message("user", _user_content(part.content))
    if isinstance(part, BaseToolReturnPart):
        return ck.Message(
            "tool", part.model_response_str(), tool_call_id=part.tool_call_id, name=part.tool_name
        )
    if isinstance(part, RetryPromptPart):  # deprecated; still in histories built by hand
        if part.tool_name is None:
            return ck.Message("user", part.model_response())
        return ck.Message("tool", part.model_response(), tool_call_id=part.tool_call_id, name=part.tool_name)
    if isinstance(part, RetryFeedbackPart):
        return ck.Message("user", part.model_response())
    return None


def _user_content(content: str | Sequence[UserContent]) -> str | tuple[ck.ContentPart, ...]:
    if isinstance(content, str):
        return content
    parts = tuple(p for p in (_content_part(item) for item in content) if p is not None)
    if len(parts) == 1 and isinstance(parts[0], ck.TextPart):
        return parts[0].text
    return parts


def _content_part(item: UserContent) -> ck.ContentPart | None:
    if isinstance(item, str):
        return ck.TextPart(item)
    if isinstance(item, TextContent):
        return ck.TextPart(item.content)
    if isinstance(item, ImageUrl):
        return ck.ImagePart(item.url, item.media_type)
    if isinstance(item, FileUrl):
        return ck.FilePart(item.url, item.media_type)
    if isinstance(item, BinaryContent):
        if item.is_image:
            return ck.ImagePart(item.data_uri, item.media_type)
        return ck.FilePart(item.data_uri, item.media_type)
    if isinstance(item, CachePoint):
        return None
    return ck.TextPart(f"[{type(item).__name__}]")  # an uploaded file: the provider holds its bytes


def reply_message(response: ModelResponse) -> ck.Message:
    """The assistant message of a response: its text, its thinking as reasoning, its tool calls."""
    texts = [p.content for p in response.parts if isinstance(p, TextPart)]
    thinking = [p.content for p in response.parts if isinstance(p, ThinkingPart) and p.content]
    calls = tuple(
        ck.ToolCall(p.tool_call_id, p.tool_name, p.args_as_json_str())
        for p in response.parts
        if isinstance(p, ToolCallPart)
    )
    return ck.Message(
        "assistant", "\n\n".join(texts) or None, tool_calls=calls, reasoning="\n\n".join(thinking) or None
    )


def usage_of(response: ModelResponse) -> Usage:
    """The provider's usage of a response (empty when the model reported none)."""
    usage: RequestUsage = response.usage
    if not usage.has_values():
        return Usage()
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cache_read_tokens or None,
        cache_write_tokens=usage.cache_write_tokens or None,
    )


def tool_dicts(parameters: ModelRequestParameters) -> list[dict[str, Any]]:
    """The request's function and output tools as OpenAI function-tool dicts (what they cost)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description or "",
                "parameters": t.parameters_json_schema,
            },
        }
        for t in (*parameters.function_tools, *parameters.output_tools)
    ]


def instructions_of(history: Sequence[ModelMessage], parameters: ModelRequestParameters) -> str | None:
    """The instructions sent beside the messages: the request's instruction parts, else the last request's."""
    if parameters.instruction_parts is not None:
        return InstructionPart.join(parameters.instruction_parts)
    last = next((m for m in reversed(history) if isinstance(m, ModelRequest)), None)
    return last.instructions if last is not None else None


def _unchanged(group: Mapped) -> ModelRequest | None:
    """The original request, when the group is every part of it the model reads, unchanged."""
    head = group[0][1]
    if (
        head is not None
        and isinstance(head.message, ModelRequest)
        and len(group) == head.read
        and all(o is not None and o.message is head.message for _, o in group)
    ):
        return head.message
    return None


def _request(group: Mapped) -> ModelRequest:
    sources = [o.message for _, o in group if o is not None and isinstance(o.message, ModelRequest)]
    parts: list[ModelRequestPart] = []
    seen: list[ModelMessage] = []
    for message, origin in group:
        if origin is None or not isinstance(origin.message, ModelRequest):
            parts.append(_new_part(message))
            continue
        parts.append(origin.message.parts[origin.part])
        if not any(origin.message is s for s in seen):  # its other parts travel with its first one
            seen.append(origin.message)
            parts.extend(p for p in origin.message.parts if not isinstance(p, _READ))
    return replace(sources[0], parts=parts) if sources else ModelRequest(parts=parts)


def _new_part(message: ck.Message) -> ModelRequestPart:
    """A request part for a message the view changed (masked, truncated) or made (summary, marker)."""
    if message.role == "tool":
        return ToolReturnPart(message.name or "", message.text, message.tool_call_id or "")
    if message.role == "system":
        return SystemPromptPart(message.text)
    return UserPromptPart(message.text)


def _new_response(message: ck.Message) -> ModelResponse:
    parts: list[ModelResponsePart] = []
    if message.reasoning:
        parts.append(ThinkingPart(message.reasoning))
    if message.text:
        parts.append(TextPart(message.text))
    parts.extend(ToolCallPart(c.name, c.arguments, c.id) for c in message.tool_calls)
    return ModelResponse(parts=parts)
