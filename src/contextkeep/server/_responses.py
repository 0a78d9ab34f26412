"""OpenAI Responses `POST /v1/responses`, managed, for either kind of upstream.

An upstream that speaks Responses (the `upstream_api` setting, or asked:
`server._responses_upstream`) gets the view as Responses input items, the client's other
fields as sent, and its answer goes back as it came (:class:`ResponsesPassthrough`). A
chat-only one gets it as chat messages: the request's `instructions` and `input` items
become chat messages (:mod:`contextkeep._formats.responses`), the view goes to its
`/chat/completions` and the reply comes back as a `response` object, or streamed as
Responses events (`response.created`, text and call-argument deltas as they arrive, each
item done, `response.completed`); function tools only.

`previous_response_id` naming a response this server answered is continued here: the
history that response ended (kept per process) plus the new input, the whole view sent
(without the id). One it never saw goes unmanaged to a Responses upstream, which holds its
chain, and is refused (400, as OpenAI words it) for a chat-only one.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contextkeep._errors import ContextKeepError
from contextkeep._formats.openai import to_openai
from contextkeep._formats.responses import chat_messages, chat_tools, output_items
from contextkeep._formats.responses_items import history as items_history
from contextkeep._messages import Message
from contextkeep.models.adapter import ModelReply
from contextkeep.server._call_pieces import CallPiece, CallPieces
from contextkeep.server._passthrough import unchanged
from contextkeep.server._responses_upstream import (
    ResponsesPassthrough,
    responses_error_event,
    speaks_responses,
)
from contextkeep.server._turn import Turn, openai_error
from contextkeep.server.proxy import (
    _CONVERSATION_HEADER,
    ChatRequest,
    Proxy,
)
from contextkeep.server.upstream import STARTED, UpstreamAdapter

__all__ = ["ResponsesRequest", "router"]

logger = logging.getLogger("contextkeep.server")

_KEPT: Final = 4096
"""Responses whose history is kept for `previous_response_id`."""
_CHAT_FIELDS: Final = ("temperature", "top_p", "parallel_tool_calls", "user")


class ResponsesRequest(BaseModel):
    """The fields the proxy reads; of the others, those a chat upstream takes are forwarded."""

    model_config = ConfigDict(extra="allow")
    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    stream: bool = False


class ResponseHistories:
    """The chat history each recent response ended, with its conversation (for `previous_response_id`)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[str, list[dict[str, Any]]]] = OrderedDict()

    def get(self, response_id: str) -> tuple[str, list[dict[str, Any]]] | None:
        """The conversation and history that response ended."""
        return self._kept.get(response_id)

    def keep(self, response_id: str, conversation: str, history: list[dict[str, Any]]) -> None:
        """Remember the history `response_id` ended."""
        self._kept[response_id] = (conversation, history)
        while len(self._kept) > _KEPT:
            self._kept.popitem(last=False)


def _tool_choice(choice: str | dict[str, Any] | None) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _chat(request: ResponsesRequest, history: list[dict[str, Any]]) -> ChatRequest:
    extra = request.model_extra or {}
    fields: dict[str, Any] = {k: extra[k] for k in _CHAT_FIELDS if k in extra}
    if request.tools:
        fields["tools"] = chat_tools(request.tools)
    if request.tool_choice is not None:
        fields["tool_choice"] = _tool_choice(request.tool_choice)
    if request.max_output_tokens is not None:
        fields["max_tokens"] = request.max_output_tokens
    return ChatRequest.model_validate(
        {**fields, "model": request.model, "stream": request.stream, "messages": history}
    )


@dataclass
class _Shape:
    """How one response is named and described (the same in its events and its final object)."""

    request: ResponsesRequest
    id: str = field(default_factory=lambda: f"resp_{uuid.uuid4().hex}")
    created_at: int = field(default_factory=lambda: int(time.time()))

    @property
    def message_id(self) -> str:
        return f"msg_{self.id[5:]}"

    def body(self, reply: ModelReply | None) -> dict[str, Any]:
        """The `response` object: in progress without a reply, completed with one."""
        r = self.request
        out: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": "in_progress" if reply is None else "completed",
            "model": reply.model if reply is not None and reply.model else r.model,
            "output": [] if reply is None else output_items(reply.message, self.message_id),
            "parallel_tool_calls": True,
            "tool_choice": r.tool_choice or "auto",
            "tools": r.tools or [],
            "instructions": r.instructions,
            "previous_response_id": r.previous_response_id,
            "max_output_tokens": r.max_output_tokens,
        }
        if reply is not None:
            u = reply.usage
            out["usage"] = {
                "input_tokens": u.input_tokens or 0,
                "input_tokens_details": {"cached_tokens": u.cached_tokens or 0},
                "output_tokens": u.output_tokens or 0,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": (u.input_tokens or 0) + (u.output_tokens or 0),
            }
        return out


@dataclass
class ResponsesUpstream(UpstreamAdapter):
    """The chat upstream adapter whose stream reaches the client as Responses events."""

    shape: _Shape | None = None
    """How the response is named (its id, its message's id)."""
    on_reply: Callable[[Message], None] | None = None
    """Called with each reply the upstream completes (the history it ends is kept for the next request)."""
    reply: ModelReply | None = None
    """The latest reply (recorded by the session when it is the last)."""
    _sequence: int = 0
    _opened: list[str] = field(default_factory=list)
    """The ids of the output items streamed, in their order."""
    _call_items: dict[int, str] = field(default_factory=dict)
    """The item id of each call streamed, by its place in the reply."""
    _calls: CallPieces = field(default_factory=CallPieces)

    async def complete(self, messages: Sequence[Message], **options: Any) -> ModelReply:
        """As `UpstreamAdapter.complete`; streamed, chat chunks are restated as Responses events."""
        out = self.sink
        if out is not None:
            self.sink = self._translating(out)
        try:
            self.reply = await super().complete(messages, **options)
        finally:
            self.sink = out
        if self.on_reply is not None:
            self.on_reply(self.reply.message)
        if out is not None:
            self._finish(out, self.reply)
        return self.reply

    def _event(self, out: Callable[[bytes], None], kind: str, **payload: Any) -> None:
        self._sequence += 1
        data = json.dumps({"type": kind, "sequence_number": self._sequence, **payload})
        out(f"event: {kind}\ndata: {data}\n\n".encode())

    def _translating(self, out: Callable[[bytes], None]) -> Callable[[bytes], None]:
        assert self.shape is not None
        shape = self.shape

        def sink(chunk: bytes) -> None:
            if chunk == STARTED:
                out(STARTED)
                self._event(out, "response.created", response=shape.body(None))
                return
            choices = json.loads(chunk[len(b"data: ") :]).get("choices") or [{}]
            delta = choices[0].get("delta") or {}
            if delta.get("content"):
                self._text(out, delta["content"])
            for entry in delta.get("tool_calls") or ():
                self._call(out, self._calls.read(entry))

        return sink

    def _text(self, out: Callable[[bytes], None], text: str) -> None:
        assert self.shape is not None
        item_id = self.shape.message_id
        if item_id not in self._opened:
            self._opened.append(item_id)
            item = {
                "type": "message",
                "id": item_id,
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            self._event(out, "response.output_item.added", output_index=len(self._opened) - 1, item=item)
            part = {"type": "output_text", "text": "", "annotations": []}
            self._event(out, "response.content_part.added", **self._at(item_id), part=part)
        self._event(out, "response.output_text.delta", **self._at(item_id), delta=text)

    def _call(self, out: Callable[[bytes], None], piece: CallPiece) -> None:
        if piece.opens and piece.id is not None:
            item_id = f"fc_{piece.id}"
            self._call_items[piece.position] = item_id
            self._opened.append(item_id)
            item = {
                "type": "function_call",
                "id": item_id,
                "call_id": piece.id,
                "name": piece.name,
                "arguments": "",
                "status": "in_progress",
            }
            self._event(out, "response.output_item.added", output_index=len(self._opened) - 1, item=item)
        streamed = self._call_items.get(piece.position)
        if piece.arguments and streamed is not None:
            at = {"item_id": streamed, "output_index": self._opened.index(streamed)}
            self._event(out, "response.function_call_arguments.delta", **at, delta=piece.arguments)

    def _at(self, item_id: str) -> dict[str, Any]:
        return {"item_id": item_id, "output_index": self._opened.index(item_id), "content_index": 0}

    def _finish(self, out: Callable[[bytes], None], reply: ModelReply) -> None:
        assert self.shape is not None
        body = self.shape.body(reply)
        # The items streamed keep their places; what did not come as deltas follows, whole.
        late = len(self._opened)
        body["output"].sort(key=lambda i: self._opened.index(i["id"]) if i["id"] in self._opened else late)
        for index, item in enumerate(body["output"]):
            streamed = item["id"] in self._opened
            if item["type"] == "message":
                at = {"item_id": item["id"], "output_index": index, "content_index": 0}
                text = item["content"][0]
                if not streamed:
                    added = {**item, "status": "in_progress", "content": []}
                    self._event(out, "response.output_item.added", output_index=index, item=added)
                    self._event(out, "response.content_part.added", **at, part={**text, "text": ""})
                self._event(out, "response.output_text.done", **at, text=text["text"])
                self._event(out, "response.content_part.done", **at, part=text)
            else:
                if not streamed:
                    added = {**item, "status": "in_progress", "arguments": ""}
                    self._event(out, "response.output_item.added", output_index=index, item=added)
                done = {"item_id": item["id"], "output_index": index, "arguments": item["arguments"]}
                self._event(out, "response.function_call_arguments.done", **done)
            self._event(out, "response.output_item.done", output_index=index, item=item)
        self._event(out, "response.completed", response=body)


async def handle(proxy: Proxy, request: Request, histories: ResponseHistories) -> Response:
    """Serve one Responses API request."""
    try:
        asked = ResponsesRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        return openai_error(400, f"invalid request: {exc}")
    setting = request.app.state.settings.upstream_api
    passed = await speaks_responses(proxy, proxy._headers(request), setting)
    try:
        history = (items_history if passed else chat_messages)(asked.input, asked.instructions)
    except ContextKeepError as exc:
        return openai_error(400, f"invalid request: {exc}")
    conversation = request.headers.get(_CONVERSATION_HEADER)
    if asked.previous_response_id is not None:
        previous = histories.get(asked.previous_response_id)
        if previous is None and passed:  # not served here: the upstream holds that chain
            logger.info("%s: passed through to the upstream", asked.previous_response_id)
            return await unchanged(request, "responses")
        if previous is None:
            return openai_error(
                400,
                f"Previous response with id {asked.previous_response_id!r} not found.",
                "previous_response_not_found",
            )
        conversation = conversation or previous[0]
        history = [*previous[1], *(m for m in history if m["role"] != "system")]
    conversation = conversation or request.app.state.derived_ids.of_messages(request, history)
    if not conversation:
        return openai_error(400, "invalid request: no user message to name the conversation after")
    try:
        chat = (_passed if passed else _chat)(asked, history)
    except (ValidationError, ContextKeepError) as exc:
        return openai_error(400, f"invalid request: {exc}")
    await proxy.use_upstream_window(proxy._headers(request))
    turn = await proxy.begin(request, conversation, chat)
    if isinstance(turn, Response):
        return turn
    if passed:
        return await _pass(
            proxy, request, turn, chat, lambda rid, said: histories.keep(rid, conversation, [*history, said])
        )
    session = turn.session
    shape = _Shape(asked)
    adapter = ResponsesUpstream(
        proxy.client,
        proxy.manager.model,
        proxy._headers(request),
        include_usage=True,
        on_call=lambda view, tokens: proxy._remember(session, view, tokens),
        shape=shape,
        on_reply=lambda m: histories.keep(shape.id, conversation, [*history, *to_openai([m])]),
    )

    if chat.stream:
        turn.memory.streaming()
        return await proxy._streamed(session, chat, adapter, turn.lock)
    return await proxy.finish(request, turn, chat, adapter, lambda: shape.body(adapter.reply))


def _passed(request: ResponsesRequest, history: list[dict[str, Any]]) -> ChatRequest:
    """The request for a Responses upstream: every field but the history sent on as the client sent it."""
    fields: dict[str, Any] = {**(request.model_extra or {}), "model": request.model, "stream": request.stream}
    if request.tool_choice is not None:
        fields["tool_choice"] = request.tool_choice
    if request.tools:
        fields["tools"] = request.tools
    if request.max_output_tokens is not None:
        fields["max_tokens"] = request.max_output_tokens
    return ChatRequest.model_validate({**fields, "messages": history})


async def _pass(
    proxy: Proxy,
    request: Request,
    turn: Turn,
    chat: ChatRequest,
    on_reply: Callable[[str, dict[str, Any]], None],
) -> Response:
    """Send the turn's view to a Responses upstream; its answer goes back to the client as it came."""
    session = turn.session
    adapter = ResponsesPassthrough(
        proxy.client,
        proxy.manager.model,
        proxy._headers(request),
        on_call=lambda view, tokens: proxy._remember(session, view, tokens),
        on_reply=on_reply,
    )
    if chat.stream:
        turn.memory.streaming()
        return await proxy._streamed(
            session, chat, adapter, turn.lock, done=b"", error_event=responses_error_event
        )
    return await proxy.finish(request, turn, chat, adapter, lambda: adapter.response or {})


router = APIRouter(tags=["proxy"])


@router.post("/v1/responses", summary="OpenAI Responses with context management (chat-only upstream)")
async def responses(request: Request) -> Response:
    """Send the managed view of the conversation to the upstream's chat completions; answer as Responses."""
    proxy: Proxy | None = request.app.state.ck.proxy
    if proxy is None:
        return openai_error(404, "proxy mode is off: start `contextkeep serve --upstream URL`")
    histories: ResponseHistories = request.app.state.responses_histories
    return await handle(proxy, request, histories)
