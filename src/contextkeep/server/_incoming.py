"""What a proxied request brings to its conversation: new messages, a retry, or a branch.

A client re-sends its whole history on every call. Parsing, converting (and hashing) all
of it would make each request cost time proportional to the history, so the parsed
messages of the client's previous request are kept: the prefix the new request shares
with them is neither parsed nor converted again, only the rest is. The prefix is
recognised by its bytes (one memcmp, see `server._raw_span`), else (the body parsed in
full) compared as parsed JSON (in C, but over the whole history).
The converted history then goes through :func:`contextkeep._continuation.new_messages`,
the rule `Session.sync` appends by.

The (non-streamed) replies of each conversation are remembered, so a retry does not call
the upstream again:

- a request carrying an `Idempotency-Key` that was already answered gets the same response;
- a request that stops right before the latest reply, with the same fields, gets that
  reply when it never reached its client (the client had gone, e.g. its timeout fired:
  the SDK's retry is exactly this request).

Any other history that stops earlier or differs is a branch (a regenerated reply, an
edited message): it is served in a fork of the conversation (see `Proxy`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contextkeep._continuation import new_messages
from contextkeep._formats.openai import from_openai
from contextkeep._messages import Message
from contextkeep.server._raw_span import Span, extended_span, find_span, without_repeated
from contextkeep.server.upstream import EncodedView

__all__ = ["ChatRequest", "ClientMemory", "Memories", "parsed"]

_Model = TypeVar("_Model", bound=BaseModel)

_KEYS_KEPT: Final = 64
"""Idempotency keys remembered per conversation."""


def parsed(raw: bytes, model: type[_Model]) -> _Model:
    """`raw` as `model`, parsed by orjson (about twice as fast as pydantic's parser on a long history).

    What orjson refuses (numbers beyond 64 bits, lone surrogates) goes to pydantic's own
    parser, which accepts it or names the error as before.
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return model.model_validate_json(raw)
    return model.model_validate(data)


class ChatRequest(BaseModel):
    """The fields the proxy reads; every other field is forwarded as sent."""

    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stream_options: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _Reply:
    """The latest reply the proxy sent (or tried to send) for a conversation."""

    conversation_id: str
    """The transcript it was recorded in (the conversation, or one of its forks)."""
    before: int
    """Transcript length before the reply: the request's history ended there."""
    fields: Mapping[str, Any]
    """The request's fields other than the messages."""
    response: Mapping[str, Any]
    """The response body."""
    delivered: bool
    """Whether the client was still connected when the response was sent."""


def _shared_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items `a` and `b` share (the whole of the shorter in one C comparison)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)


@dataclass
class ClientMemory:
    """One client conversation (its `X-Conversation-Id`): conversions, current branch, replies."""

    root: str
    """The conversation id the client names."""
    branch: str = ""
    """The transcript its requests continue now (the root, or a fork of it)."""
    encoded: EncodedView = field(default_factory=EncodedView)
    """The last view sent upstream for it, encoded (the next request encodes only what it appended)."""
    _raw: list[Any] = field(default_factory=list)
    _body: bytes = b""
    _span: Span | None = None
    _checked: tuple[bytes, Span | None] | None = None
    """The body last compared with the last body, and what that found (until `convert` moves on)."""
    _messages: list[Message] = field(default_factory=list)
    _reply: _Reply | None = None
    _keyed: OrderedDict[str, Mapping[str, Any]] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        self.branch = self.branch or self.root

    def parsed(self, body: bytes) -> ChatRequest:
        """`body` as a chat request, parsing only what follows the messages of the client's last body.

        When `body` repeats those messages byte for byte, they are the ones parsed then; the
        rest (the other fields and the new messages) is parsed as a document of its own.
        Anything else (no new message, an error to report) parses in full.
        """
        unseen = self._unseen(body)
        if unseen is not None:
            rest, new = unseen
            try:
                chat: ChatRequest | None = parsed(rest, ChatRequest)
            except ValidationError:  # the full parse below reports it, naming the message's index
                chat = None
            if chat is not None and len(chat.messages) == new:
                chat.messages = self._raw + chat.messages
                return chat
        return parsed(body, ChatRequest)

    def _unseen(self, body: bytes) -> tuple[bytes, int] | None:
        """`body` without the messages of the last body (`without_repeated`), and how many are new."""
        last = self._span
        span = self._extended(body, last) if last is not None and last.size else None
        if span is None or last is None or span.size == last.size:
            return None
        rest = without_repeated(body, span, last)
        return None if rest is None else (rest, span.size - last.size)

    def convert(self, raw: list[Any], body: bytes | None = None) -> list[Message]:
        """`raw` (OpenAI chat messages, parsed from `body`) as messages, converting only what is new.

        What the last request sent is recognised by its bytes in `body` when their place is
        known (see `server._raw_span`), else by comparing the parsed messages. Raises
        `MessageFormatError` (naming the message's index) like `from_openai`.
        """
        last = self._span
        span = self._extended(body, last) if body is not None and last is not None else None
        if span is not None and last is not None and span.size == len(raw):
            shared = last.size
        else:
            shared = _shared_prefix(self._raw, raw)
            # The client appends: learn where its messages lie, for the next request.
            span = find_span(body) if body is not None and shared == len(self._raw) else None
        try:
            tail = from_openai(raw[shared:])
        except ValueError:
            from_openai(raw)  # again in full, for the index in the whole history
            raise
        messages = self._messages[:shared] + tail
        self._raw, self._messages = raw, messages
        known = span is not None and span.size == len(raw)
        self._body, self._span = (body or b"", span) if known else (b"", None)
        self._checked = None
        return messages

    def _extended(self, body: bytes, last: Span) -> Span | None:
        """`extended_span` of `body` after the last body (at `last`): compared once per body."""
        if self._checked is not None and self._checked[0] is body:  # `parsed` compared it already
            return self._checked[1]
        span = extended_span(body, self._body, last)
        self._checked = (body, span)
        return span

    def keyed(self, key: str | None) -> Mapping[str, Any] | None:
        """The response already sent for idempotency key `key`."""
        return self._keyed.get(key) if key is not None else None

    def undelivered(
        self, conversation_id: str, transcript: Sequence[Message], incoming: Sequence[Message], fields: Any
    ) -> Mapping[str, Any] | None:
        """The latest reply, if `incoming` is the very request it answered and the client never got it."""
        reply = self._reply
        if reply is None or reply.delivered or reply.conversation_id != conversation_id:
            return None
        if reply.fields != fields or new_messages(transcript[: reply.before], incoming) != []:
            return None
        return reply.response

    def delivered(self) -> None:
        """The latest reply reached its client (a retry got it): the same request again is a branch."""
        if self._reply is not None:
            self._reply = replace(self._reply, delivered=True)

    def streaming(self) -> None:
        """A streamed reply follows (not kept: the stream itself was the response)."""
        self._reply = None

    def replied(
        self,
        conversation_id: str,
        before: int,
        fields: Mapping[str, Any],
        response: Mapping[str, Any],
        *,
        delivered: bool,
        key: str | None,
    ) -> None:
        """Remember the response to the request that ended the transcript at `before` messages."""
        self._reply = _Reply(conversation_id, before, fields, response, delivered)
        if key is not None:
            self._keyed[key] = response
            while len(self._keyed) > _KEYS_KEPT:
                self._keyed.popitem(last=False)


class Memories:
    """The `ClientMemory` of the conversations served lately (least recently used dropped beyond `limit`).

    Each holds the parsed messages of its client's last request. A dropped one costs only
    speed and retry detection: its next request converts in full.
    """

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._kept: OrderedDict[str, ClientMemory] = OrderedDict()

    def of(self, conversation_id: str) -> ClientMemory:
        """The conversation's memory (a new one the first time)."""
        memory = self._kept.get(conversation_id)
        if memory is None:
            memory = self._kept[conversation_id] = ClientMemory(conversation_id)
        self._kept.move_to_end(conversation_id)
        while len(self._kept) > self.limit:
            self._kept.popitem(last=False)
        return memory
