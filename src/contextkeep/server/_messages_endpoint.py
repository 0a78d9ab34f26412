"""Anthropic Messages `POST /v1/messages`, managed like chat completions, for either kind of upstream.

The request's `system` and `messages` are the agent's whole history. They are read with
`from_anthropic` (a thinking block keeps its text and signature; tool_use and tool_result
blocks become calls and results) and go through the proxy's own path
(`Proxy._continue`: new messages, retries, idempotency keys, branches; `Proxy._complete`
and `Proxy._streamed`: prepare, call, record, compact-and-retry), with
:class:`~contextkeep.server._anthropic_upstream.AnthropicUpstream` as the model. The view
reaches the upstream's `/messages` as Messages API content, the reply comes back to the
client as the upstream sent it (streamed: event by event), and it is recorded. There the
configured key goes as `x-api-key`; the client's own `cache_control` marks stay on the
blocks of the messages the view leaves unchanged (`server._client_marks`), and, while the 4
breakpoints allow, one more marks the end of the view's stable prefix (`StablePrefix`).
An upstream without the Messages API gets the view as chat completions, answered in the
Messages format (`server._messages_chat`).

A request without `X-Conversation-Id` gets an id derived from its `system` and first user
message (see `server._derived_id`); one with no user message is passed through unmanaged.
Errors of the proxy's own come in the Messages API's error shape; the upstream's own
errors as the upstream sent them.
"""

from __future__ import annotations

import json
import weakref
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contextkeep._errors import ContextKeepError
from contextkeep._formats.anthropic import from_anthropic
from contextkeep._formats.openai import to_openai
from contextkeep._session import Session
from contextkeep.server._anthropic_upstream import AnthropicUpstream, StablePrefix
from contextkeep.server._client_marks import client_marks
from contextkeep.server._derived_id import derived_conversation_id
from contextkeep.server._messages_chat import ChatForMessages, anthropic_error_event, speaks_messages
from contextkeep.server._passthrough import forwarded_headers, unchanged
from contextkeep.server.proxy import (
    _CONVERSATION_HEADER,
    ChatRequest,
    Proxy,
)

__all__ = ["MessagesRequest", "router"]

_PREFIXES: weakref.WeakKeyDictionary[Session, StablePrefix] = weakref.WeakKeyDictionary()
"""Each live conversation's previous view, for its `cache_control` breakpoint."""


class MessagesRequest(BaseModel):
    """The fields the proxy reads; every other field is forwarded as sent."""

    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    max_tokens: int = Field(ge=1)
    stream: bool = False
    tools: list[dict[str, Any]] | None = None


def anthropic_error(status: int, message: str) -> JSONResponse:
    """An error in the Messages API's body shape."""
    kind = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}.get(
        status, "invalid_request_error" if status < 500 else "api_error"
    )
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)


def _in_messages_shape(response: Response) -> Response:
    """`response`, an error in OpenAI's shape (the proxy's, a chat upstream's) in the Messages API's."""
    if response.status_code < 400 or not (response.media_type or "").startswith("application/json"):
        return response
    try:
        body = json.loads(bytes(response.body))
    except ValueError:
        return response
    if not isinstance(body, dict):
        return response
    error = body.get("error")
    if body.get("type") == "error" or not isinstance(error, dict):
        return response
    return anthropic_error(response.status_code, str(error.get("message")))


def _as_chat(request: MessagesRequest) -> ChatRequest:
    """The request as the proxy's chat request: its history in (lossless) OpenAI form."""
    history = to_openai(from_anthropic(request.messages, request.system), lossless=True)
    fields = request.model_dump(exclude={"messages", "system"}, exclude_none=True)
    return ChatRequest.model_validate({**fields, **(request.model_extra or {}), "messages": history})


async def _refused(request: Request, conversation: str | None, error: ValidationError) -> Response:
    """A 400 for an invalid request the proxy manages; one it would not manage goes on unchanged."""
    try:
        body = json.loads(await request.body())
    except ValueError:
        body = None
    managed = conversation or (
        isinstance(body, dict)
        and isinstance(body.get("messages"), list)
        and derived_conversation_id(body["messages"], body.get("system")) is not None
    )
    if not managed:
        return await unchanged(request, "messages")
    return anthropic_error(400, f"invalid request: {error}")


async def handle(proxy: Proxy, request: Request) -> Response:
    """Serve one Messages API request."""
    conversation = request.headers.get(_CONVERSATION_HEADER)
    try:  # parsed once: the derived id is read from the parsed `system` and `messages`
        asked = MessagesRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        return await _refused(request, conversation, exc)
    conversation = conversation or request.app.state.derived_ids.of_messages(
        request, asked.messages, asked.system
    )
    if not conversation:
        return await unchanged(request, "messages")
    try:
        chat = _as_chat(asked)
    except ContextKeepError as exc:
        return anthropic_error(400, f"invalid request: {exc}")
    await proxy.use_upstream_window(proxy._headers(request))
    setting = request.app.state.settings.upstream_api
    anthropic = await speaks_messages(proxy, _anthropic_headers(proxy, request), setting)
    turn = await proxy.begin(request, conversation, chat)
    if isinstance(turn, Response):
        return _in_messages_shape(turn)
    session = turn.session
    on_call = lambda view, tokens: proxy._remember(session, view, tokens)  # noqa: E731
    adapter: AnthropicUpstream | ChatForMessages = (
        AnthropicUpstream(
            proxy.client,
            proxy.manager.model,
            _anthropic_headers(proxy, request),
            on_call=on_call,
            prefix=_PREFIXES.setdefault(session, StablePrefix()),
            system_blocks=asked.system if isinstance(asked.system, list) else None,
            client_marks=client_marks(await request.body(), asked.messages, asked.system, asked.tools),
        )
        if anthropic
        else ChatForMessages(
            proxy.client,
            proxy.manager.model,
            _chat_headers(proxy, request),
            on_call=on_call,
            model=chat.model,
        )
    )
    if chat.stream:
        turn.memory.streaming()
        streamed = proxy._streamed(
            session, chat, adapter, turn.lock, done=b"", error_event=anthropic_error_event
        )
        return _in_messages_shape(await streamed)

    def reply() -> dict[str, Any]:
        return (adapter.response if isinstance(adapter, AnthropicUpstream) else adapter.message) or {}

    return _in_messages_shape(await proxy.finish(request, turn, chat, adapter, reply))


def _anthropic_headers(proxy: Proxy, request: Request) -> dict[str, str]:
    """The client's headers for an Anthropic upstream: the configured key as its `x-api-key`."""
    headers = forwarded_headers(proxy, request)
    if proxy._api_key:
        headers.pop("authorization", None)
        headers["x-api-key"] = proxy._api_key
    return headers


def _chat_headers(proxy: Proxy, request: Request) -> dict[str, str]:
    """Headers for a chat upstream: as for chat completions, a client's `x-api-key` as its bearer token."""
    headers = proxy._headers(request)
    key = request.headers.get("x-api-key")
    if "authorization" not in headers and key:
        headers["authorization"] = f"Bearer {key}"
    return headers


router = APIRouter(tags=["proxy"])


@router.post(
    "/v1/messages",
    summary="Anthropic Messages with context management",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": MessagesRequest.model_json_schema()}},
        }
    },
)
async def messages(request: Request) -> Response:
    """Send the managed view of the conversation to the upstream's `/messages` instead of `messages`."""
    proxy: Proxy | None = request.app.state.ck.proxy
    if proxy is None:
        return anthropic_error(404, "proxy mode is off: start `contextkeep serve --upstream URL`")
    return await handle(proxy, request)
