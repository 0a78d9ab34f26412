"""OpenAI-compatible `POST /v1/chat/completions` that manages each conversation's context.

The request's ``messages`` are the agent's full history, of the conversation its
``X-Conversation-Id`` names (or one derived from the history's head, `server._derived_id`): what is new
since the stored transcript (:mod:`contextkeep._continuation`) is appended, and `Session.complete`
prepares the view, forwards it with the request's other fields, records the reply with its usage,
and on an upstream overflow compacts and retries. Upstream authorization: the configured key,
else the client's own ``Authorization`` header unless the server's bearer token consumed it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.background import BackgroundTask

from contextkeep._capabilities import CapacitySource, served_window
from contextkeep._continuation import first_divergence, fork_id, new_messages
from contextkeep._errors import ContextKeepError, StoreError
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._session import Session
from contextkeep.server._incoming import ChatRequest, ClientMemory, Memories
from contextkeep.server._turn import Turn, _error_event, _failure, _Replayed, openai_error
from contextkeep.server.kept import KeptConversations
from contextkeep.server.upstream import UpstreamAdapter, upstream_headers
from contextkeep.server.views import CallLog

__all__ = ["ChatRequest", "Proxy", "router"]

logger = logging.getLogger("contextkeep.server")

_CONVERSATION_HEADER = "x-conversation-id"
_IDEMPOTENCY_HEADER: Final = "idempotency-key"
_BRANCHES: Final = 16
"""Forks of forks followed before a history is refused (each is a transcript of its own)."""


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
        kept: KeptConversations | None = None,
    ) -> None:
        self.manager = manager
        self.client = httpx.AsyncClient(
            base_url=upstream.rstrip("/") + "/", timeout=httpx.Timeout(timeout, connect=10.0)
        )
        self._api_key = api_key
        self._consume_authorization = consume_authorization
        self._agent = (agent_id, agent_version)
        self.kept = kept if kept is not None else KeptConversations()
        """Sessions, locks and call histories, evicted when idle (see `server.kept`)."""
        self.calls: Mapping[str, Sequence[dict[str, Any]]] = CallLog(self.kept, self._transcript)
        """The views sent at each conversation's recent calls, described for the inspector."""
        self.memories = Memories(self.kept.limit)
        """What each client conversation sent and was answered (see `server._incoming`)."""
        self._windows: dict[str, int | None] = {}

    def is_live(self, conversation_id: str) -> bool:
        """Whether this process serves the conversation (its events are forwarded live)."""
        return conversation_id in self.kept

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
        derived = request.app.state.derived_ids
        conversation = request.headers.get(_CONVERSATION_HEADER) or await derived.of(request)
        if not conversation:  # no header, no user message to name it after (`server._derived_id`)
            return await self._pass_through(await request.body(), self._headers(request))
        raw = await request.body()
        try:
            chat = self.memories.of(conversation).parsed(raw)
        except ValidationError as exc:
            return openai_error(400, f"invalid request: {exc}")
        await self.use_upstream_window(self._headers(request))
        turn = await self.begin(request, conversation, chat, body=raw)
        if isinstance(turn, Response):
            return turn
        session = turn.session
        adapter = UpstreamAdapter(
            self.client,
            self.manager.model,
            self._headers(request),
            include_usage=bool((chat.stream_options or {}).get("include_usage")),
            on_call=lambda view, tokens: self._remember(session, view, tokens),
            encoded=turn.memory.encoded,
        )
        if chat.stream:
            turn.memory.streaming()
            return await self._streamed(session, chat, adapter, turn.lock)
        return await self.finish(request, turn, chat, adapter, lambda: adapter.response or {})

    async def begin(
        self, request: Request, conversation: str, chat: ChatRequest, *, body: bytes | None = None
    ) -> Turn | Response:
        """Take the conversation's lock and continue its transcript with `chat` (parsed from `body`).

        A stored reply (a retry, an idempotency key) or a refusal comes back as the response,
        the lock released; otherwise the turn holds the lock for :meth:`finish` or the stream.
        """
        memory, key = self.memories.of(conversation), request.headers.get(_IDEMPOTENCY_HEADER)
        fields = chat.model_dump(exclude={"messages"}, exclude_none=True)
        lock = self.kept.lock(conversation)
        await lock.acquire()
        try:
            served = await self._continue(memory, chat, fields, key, body)
        except BaseException:
            lock.release()
            raise
        if isinstance(served, Response):
            if isinstance(served, _Replayed) and not await request.is_disconnected():
                memory.delivered()
            lock.release()
            return served
        session, before = served
        return Turn(memory, key, fields, lock, session, before)

    async def finish(
        self,
        request: Request,
        turn: Turn,
        chat: ChatRequest,
        adapter: UpstreamAdapter,
        reply: Callable[[], dict[str, Any]],
    ) -> Response:
        """Call the upstream for a non-streamed turn and remember `reply()`; the lock is released."""
        try:
            await self._complete(turn.session, chat, adapter)
            body = reply()
            # A client that left (its timeout fired) never got this reply: its retry gets it, uncalled.
            delivered = not await request.is_disconnected()
            turn.memory.replied(
                turn.session.conversation_id,
                turn.before,
                turn.fields,
                body,
                delivered=delivered,
                key=turn.key,
            )
        except Exception as exc:
            return _failure(exc, adapter)
        finally:
            turn.lock.release()
        if body is adapter.response and adapter.content is not None:  # the upstream's reply as it is
            return Response(adapter.content, media_type="application/json")
        return JSONResponse(body)

    async def use_upstream_window(self, headers: Mapping[str, str] | None = None) -> None:
        """Budget for the upstream's own window unless one was given (explicit > upstream > registry).

        Asked once per model (`/v1/models`, else Ollama's `/api/show`) and kept.
        """
        spec = self.manager.model
        if spec.source is CapacitySource.EXPLICIT or spec.key in self._windows:
            return
        sent = upstream_headers({}, self._api_key) if headers is None else headers
        try:
            window = await served_window(self.client, str(self.client.base_url), spec.key, sent)
            self._windows[spec.key] = window
        except httpx.HTTPError as exc:  # asked again at the next request
            logger.info("no model list from the upstream: %s", exc)
            return
        if window is not None and window != spec.context_window:
            logger.info(
                "%s: the upstream serves a %d-token window (%s figure: %s)",
                spec.key,
                window,
                spec.source.value,
                spec.context_window,
            )
            self.manager.model = replace(spec, context_window=window, source=CapacitySource.UPSTREAM)

    async def _continue(
        self,
        memory: ClientMemory,
        chat: ChatRequest,
        fields: Mapping[str, Any],
        key: str | None,
        body: bytes | None,
    ) -> tuple[Session, int] | Response:
        """The session the request continues, with its new messages added (and the transcript's length).

        Or the response already due: the one given for the same idempotency key, the reply
        its client never got, or a refusal.
        """
        stored = memory.keyed(key)
        if stored is not None:
            return JSONResponse(stored)
        try:
            incoming = memory.convert(chat.messages, body)
        except (ContextKeepError, KeyError, TypeError, ValueError) as exc:
            return openai_error(400, f"invalid request: {exc}")
        session = await self._session(memory.branch)
        transcript = session.transcript
        fresh = new_messages(transcript, incoming)
        if fresh is None:
            again = memory.undelivered(session.conversation_id, transcript, incoming, fields)
            if again is not None:
                logger.info("%s: a retry of the reply its client never got", session.conversation_id)
                return _Replayed(again)
            branched = await self._branch(memory, incoming)
            if branched is None:
                return openai_error(
                    409,
                    f"the messages continue none of the {_BRANCHES} branches of conversation "
                    f"{memory.root!r}; use a new X-Conversation-Id",
                    "conversation_diverged",
                )
            session, fresh = branched
        if fresh:
            try:
                await session.add(fresh)
            except StoreError:
                raise
            except ContextKeepError as exc:
                return openai_error(400, str(exc), "malformed_history")
        return session, len(session.transcript)

    async def _branch(
        self, memory: ClientMemory, incoming: Sequence[Message]
    ) -> tuple[Session, list[Message]] | None:
        """The transcript a retried, regenerated or edited history continues: the conversation or a fork.

        A fork is named after the history up to where it differs (`fork_id`), so the same
        branch lands in the same fork, in any process; a fork taken already by another
        branch forks again.
        """
        current = await self._session(memory.root)
        for _ in range(_BRANCHES):
            transcript = current.transcript
            fresh = new_messages(transcript, incoming)
            if fresh is not None:
                if current.conversation_id != memory.branch:
                    logger.info("%s continues in %s", memory.root, current.conversation_id)
                memory.branch = current.conversation_id
                return current, fresh
            at = first_divergence(transcript, incoming)
            current = await self._session(fork_id(current.conversation_id, incoming, at))
        return None

    async def _session(self, conversation: str) -> Session:
        session = self.kept.session(conversation)
        if session is None:
            agent_id, agent_version = self._agent
            session = self.manager.new_session(conversation, agent_id=agent_id, agent_version=agent_version)
            self.kept.keep(session)
        await session.load()
        return session

    async def _complete(self, session: Session, chat: ChatRequest, adapter: UpstreamAdapter) -> None:
        options = chat.model_dump(exclude={"messages", "tools", "max_tokens"}, exclude_none=True)
        options.update(chat.model_extra or {})
        max_tokens = chat.max_tokens or chat.max_completion_tokens
        await session.complete(adapter, tools=chat.tools, max_tokens=max_tokens, **options)

    async def _streamed(
        self,
        session: Session,
        chat: ChatRequest,
        adapter: UpstreamAdapter,
        lock: asyncio.Lock,
        *,
        done: bytes = b"data: [DONE]\n\n",
        error_event: Callable[[Exception], bytes] | None = None,
    ) -> Response:
        """Stream the reply; `done` follows a recorded one.

        `error_event` tells any failure after the start; without it, an error of ours is told in
        OpenAI's shape and other failures just end the stream.
        """
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
                if done:
                    yield done  # after the reply is recorded: the next request sees it
            except ContextKeepError as exc:  # ours to tell the client (a truncated prompt): SDKs raise it
                logger.warning("stream of %s failed after it started: %s", session.conversation_id, exc)
                yield (error_event or _error_event)(exc)
            except Exception as exc:
                logger.exception("stream of %s failed after it started", session.conversation_id)
                if error_event is not None:
                    yield error_event(exc)
            finally:
                task.cancel()  # a client that left: the reply it never got is not recorded

        return StreamingResponse(events(), media_type="text/event-stream")

    def _remember(self, session: Session, view: Sequence[Message], tokens: int) -> None:
        calls = self.kept.calls(session.conversation_id)
        calls.append(CallLog.record((calls[-1]["call"] + 1) if calls else 1, view, tokens))

    def _transcript(self, conversation_id: str) -> Sequence[Message]:
        session = self.kept.session(conversation_id)
        return session.transcript if session is not None else ()

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
