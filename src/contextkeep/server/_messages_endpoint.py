"""Anthropic Messages `POST /v1/messages`, managed like chat completions, for an Anthropic upstream.

The request's `system` and `messages` are the agent's whole history. They are read with
`from_anthropic` (a thinking block keeps its text and signature; tool_use and tool_result
blocks become calls and results) and go through the proxy's own path
(`Proxy._continue`: new messages, retries, idempotency keys, branches; `Proxy._complete`
and `Proxy._streamed`: prepare, call, record, compact-and-retry), with
:class:`~contextkeep.server._anthropic_upstream.AnthropicUpstream` as the model. The view
reaches the upstream's `/messages` as Messages API content, the reply comes back to the
client as the upstream sent it (streamed: event by event), and it is recorded.

A request without `X-Conversation-Id` gets an id derived from its `system` and first user
message (see `server._derived_id`); one with no user message is passed through unmanaged.
Errors of the proxy's own come in the Messages API's error shape; the upstream's own
errors as the upstream sent them.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contextkeep._errors import ContextKeepError
from contextkeep._formats.anthropic import from_anthropic
from contextkeep._formats.openai import to_openai
from contextkeep.server._anthropic_upstream import AnthropicUpstream
from contextkeep.server._passthrough import forwarded_headers, unchanged
from contextkeep.server.proxy import (
    _CONVERSATION_HEADER,
    _IDEMPOTENCY_HEADER,
    ChatRequest,
    Proxy,
    _failure,
    _Replayed,
)

__all__ = ["MessagesRequest", "router"]


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
    """`response`, a proxy error in OpenAI's shape restated in the Messages API's."""
    if response.status_code < 400 or not isinstance(response, JSONResponse):
        return response
    body = json.loads(bytes(response.body))
    error = body.get("error") if isinstance(body, dict) else None
    if body.get("type") == "error" or not isinstance(error, dict):
        return response
    return anthropic_error(response.status_code, str(error.get("message")))


def _as_chat(request: MessagesRequest) -> ChatRequest:
    """The request as the proxy's chat request: its history in (lossless) OpenAI form."""
    history = to_openai(from_anthropic(request.messages, request.system), lossless=True)
    fields = request.model_dump(exclude={"messages", "system"}, exclude_none=True)
    return ChatRequest.model_validate({**fields, **(request.model_extra or {}), "messages": history})


async def handle(proxy: Proxy, request: Request) -> Response:
    """Serve one Messages API request."""
    conversation = request.headers.get(_CONVERSATION_HEADER) or await request.app.state.derived_ids.of(
        request
    )
    if not conversation:
        return await unchanged(request, "messages")
    try:
        chat = _as_chat(MessagesRequest.model_validate_json(await request.body()))
    except (ValidationError, ContextKeepError) as exc:
        return anthropic_error(400, f"invalid request: {exc}")
    headers = forwarded_headers(proxy, request)
    await proxy.use_upstream_window(proxy._headers(request))
    memory, key = proxy.memories.of(conversation), request.headers.get(_IDEMPOTENCY_HEADER)
    fields = chat.model_dump(exclude={"messages"}, exclude_none=True)
    lock = proxy.kept.lock(conversation)
    await lock.acquire()
    try:
        served = await proxy._continue(memory, chat, fields, key)
    except BaseException:
        lock.release()
        raise
    if isinstance(served, Response):
        if isinstance(served, _Replayed) and not await request.is_disconnected():
            memory.delivered()
        lock.release()
        return _in_messages_shape(served)
    session, before = served
    adapter = AnthropicUpstream(
        proxy.client,
        proxy.manager.model,
        headers,
        on_call=lambda view, tokens: proxy._remember(session, view, tokens),
    )
    if chat.stream:
        memory.streaming()
        return _in_messages_shape(await proxy._streamed(session, chat, adapter, lock))
    try:
        await proxy._complete(session, chat, adapter)
        delivered = not await request.is_disconnected()
        memory.replied(
            session.conversation_id, before, fields, adapter.response or {}, delivered=delivered, key=key
        )
    except Exception as exc:
        return _in_messages_shape(_failure(exc, adapter))
    finally:
        lock.release()
    return JSONResponse(adapter.response)


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
