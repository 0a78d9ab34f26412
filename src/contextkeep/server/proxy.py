"""OpenAI-compatible `POST /v1/chat/completions` that manages each conversation's context.

With an ``X-Conversation-Id`` header the request's ``messages`` are taken as the agent's
full history: what is new since the stored transcript (see :mod:`contextkeep._continuation`)
is appended, and `Session.complete` prepares the view (deferred compression included),
forwards it with the request's other fields, records the reply with its usage, and on an
upstream overflow compacts and retries (``max_token_limit_recovery_attempts``). Without the
header the request is passed through untouched.

Authorization upstream: the configured upstream key when there is one; otherwise the
client's own ``Authorization`` header, unless the server's bearer token consumed it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.background import BackgroundTask

from contextkeep._continuation import new_messages
from contextkeep._errors import ContextKeepError, ContextOverflowError, StoreError
from contextkeep._formats.openai import from_openai
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._session import Session
from contextkeep.server.upstream import UpstreamAdapter, upstream_headers
from contextkeep.server.views import describe_message

__all__ = ["ChatRequest", "Proxy", "router"]

logger = logging.getLogger("contextkeep.server")

_CALLS_KEPT = 50
_CONVERSATION_HEADER = "x-conversation-id"


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


def openai_error(status: int, message: str, code: str | None = None) -> JSONResponse:
    """An error in OpenAI's body shape."""
    kind = "invalid_request_error" if status < 500 else "api_error"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status)


class Proxy:
    """Per-conversation sessions (one request at a time each) in front of one upstream."""

    def __init__(
        self,
        manager: ContextManager,
        upstream: str,
        *,
        api_key: str | None = None,
        consume_authorization: bool = False,
        agent_id: str = "default",
        agent_version: str = "0",
        timeout: float = 600.0,
    ) -> None:
        self.manager = manager
        self.client = httpx.AsyncClient(
            base_url=upstream.rstrip("/") + "/", timeout=httpx.Timeout(timeout, connect=10.0)
        )
        self._api_key = api_key
        self._consume_authorization = consume_authorization
        self._agent = (agent_id, agent_version)
        self._sessions: dict[str, Session] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.calls: dict[str, deque[dict[str, Any]]] = {}

    def is_live(self, conversation_id: str) -> bool:
        """Whether this process serves the conversation (its events are forwarded live)."""
        return conversation_id in self._sessions

    async def close(self) -> None:
        """Close the upstream connections."""
        await self.client.aclose()

    def _headers(self, request: Request) -> dict[str, str]:
        incoming = dict(request.headers)
        if self._consume_authorization:
            incoming.pop("authorization", None)
        return upstream_headers(incoming, self._api_key)

    async def handle(self, request: Request) -> Response:
        """Serve one chat-completions request."""
        conversation = request.headers.get(_CONVERSATION_HEADER)
        if not conversation:
            return await self._pass_through(await request.body(), self._headers(request))
        try:
            chat = ChatRequest.model_validate_json(await request.body())
            incoming = from_openai(chat.messages)
        except (ValidationError, ContextKeepError, KeyError, TypeError, ValueError) as exc:
            return openai_error(400, f"invalid request: {exc}")
        lock = self._locks.setdefault(conversation, asyncio.Lock())
        await lock.acquire()
        try:
            session = await self._session(conversation)
            refused = await self._append(session, incoming)
        except BaseException:
            lock.release()
            raise
        if refused is not None:
            lock.release()
            return refused
        adapter = UpstreamAdapter(
            self.client,
            self.manager.model,
            self._headers(request),
            include_usage=bool((chat.stream_options or {}).get("include_usage")),
            on_call=lambda view: self._remember(session, view, chat.tools),
        )
        if chat.stream:
            return await self._streamed(session, chat, adapter, lock)
        try:
            await self._complete(session, chat, adapter)
        except Exception as exc:
            return _failure(exc, adapter)
        finally:
            lock.release()
        return JSONResponse(adapter.response)

    async def _session(self, conversation: str) -> Session:
        session = self._sessions.get(conversation)
        if session is None:
            agent_id, agent_version = self._agent
            session = self.manager.new_session(conversation, agent_id=agent_id, agent_version=agent_version)
            self._sessions[conversation] = session
        await session.load()
        return session

    async def _append(self, session: Session, incoming: Sequence[Message]) -> Response | None:
        fresh = new_messages(session.transcript, incoming)
        if fresh is None:
            return openai_error(
                409,
                f"the messages do not continue conversation {session.conversation_id!r} "
                "(its latest reply is missing); use a new X-Conversation-Id",
                "conversation_diverged",
            )
        if fresh:
            try:
                await session.add(fresh)
            except StoreError:
                raise
            except ContextKeepError as exc:
                return openai_error(400, str(exc), "malformed_history")
        return None

    async def _complete(self, session: Session, chat: ChatRequest, adapter: UpstreamAdapter) -> None:
        options = chat.model_dump(exclude={"messages", "tools", "max_tokens"}, exclude_none=True)
        options.update(chat.model_extra or {})
        max_tokens = chat.max_tokens or chat.max_completion_tokens
        await session.complete(adapter, tools=chat.tools, max_tokens=max_tokens, **options)

    async def _streamed(
        self, session: Session, chat: ChatRequest, adapter: UpstreamAdapter, lock: asyncio.Lock
    ) -> Response:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        adapter.sink = queue.put_nowait

        async def run() -> None:
            try:
                await self._complete(session, chat, adapter)
            finally:
                lock.release()
                queue.put_nowait(None)

        task = asyncio.create_task(run())
        if await queue.get() is None:  # ended before the upstream accepted: an error
            try:
                await task
            except Exception as exc:
                return _failure(exc, adapter)
            return openai_error(502, "the upstream stream ended before it started")

        async def events() -> AsyncIterator[bytes]:
            try:
                while (item := await queue.get()) is not None:
                    yield item
                await task
                yield b"data: [DONE]\n\n"  # after the reply is recorded: the next request sees it
            except ContextKeepError as exc:  # ours to tell the client (a truncated prompt): SDKs raise it
                logger.warning("stream of %s failed after it started: %s", session.conversation_id, exc)
                yield _error_event(exc)
            except Exception:
                logger.exception("stream of %s failed after it started", session.conversation_id)
            finally:
                task.cancel()  # a client that left: the reply it never got is not recorded

        return StreamingResponse(events(), media_type="text/event-stream")

    def _remember(
        self, session: Session, view: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None
    ) -> None:
        by_id: dict[str | None, Message] = {m.id: m for m in session.transcript if m.id}
        calls = self.calls.setdefault(session.conversation_id, deque(maxlen=_CALLS_KEPT))
        calls.append(
            {
                "call": (calls[-1]["call"] + 1) if calls else 1,
                "at": time.time(),
                "tokens": session.counter.count_prompt(view, tools),
                "messages": [describe_message(m, by_id.get(m.id)) for m in view],
            }
        )

    async def _pass_through(self, raw: bytes, headers: dict[str, str]) -> Response:
        request = self.client.build_request(
            "POST", "chat/completions", content=raw, headers={**headers, "content-type": "application/json"}
        )
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            return openai_error(502, f"upstream unreachable: {exc}", "upstream_unreachable")
        return StreamingResponse(
            response.aiter_bytes(),
            status_code=response.status_code,
            media_type=response.headers.get("content-type"),
            background=BackgroundTask(response.aclose),
        )


def _failure(exc: Exception, adapter: UpstreamAdapter) -> Response:
    if adapter.failure is not None and not isinstance(exc, httpx.HTTPError):
        f = adapter.failure
        return Response(f.body, status_code=f.status, media_type=f.content_type)
    if isinstance(exc, httpx.HTTPError):
        return openai_error(502, f"upstream unreachable: {exc}", "upstream_unreachable")
    if isinstance(exc, ContextKeepError) and not isinstance(exc, StoreError):
        return openai_error(400, str(exc), _error_code(exc))
    raise exc


def _error_code(exc: ContextKeepError) -> str | None:
    """OpenAI's code for an overflow (a silent truncation included), so clients classify it as one."""
    overflow = exc if isinstance(exc, ContextOverflowError) else exc.__cause__
    return "context_length_exceeded" if isinstance(overflow, ContextOverflowError) else None


def _error_event(exc: ContextKeepError) -> bytes:
    """An error as a stream event, in the shape OpenAI sends one mid-stream."""
    error = {"message": str(exc), "type": "api_error", "param": None, "code": _error_code(exc)}
    return f"data: {json.dumps({'error': error})}\n\n".encode()


router = APIRouter(tags=["proxy"])


@router.post(
    "/v1/chat/completions",
    summary="OpenAI-compatible chat completions with context management",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ChatRequest.model_json_schema()}},
        },
        "parameters": [
            {
                "name": "X-Conversation-Id",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "Manage this conversation's context; without it the request passes through.",
            }
        ],
    },
)
async def chat_completions(request: Request) -> Response:
    """Forward to the upstream; with `X-Conversation-Id`, send the managed view instead of `messages`."""
    proxy: Proxy | None = request.app.state.ck.proxy
    if proxy is None:
        return openai_error(404, "proxy mode is off: start `contextkeep serve --upstream URL`")
    return await proxy.handle(request)
