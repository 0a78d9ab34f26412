"""REST endpoints under `/api`.

Conversations, status, usage scopes, current view, records, transcript, references.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import PlainTextResponse

from contextkeep._baseline import USAGE_DOCUMENT, UsageState
from contextkeep._documents import COMPACTION_DOCUMENT
from contextkeep._errors import UnsafePathError, WorkspaceError
from contextkeep._messages import message_to_dict
from contextkeep.server._history import history as replay_history
from contextkeep.server._history import last_activity
from contextkeep.server.context import ServerContext, context, known_conversation
from contextkeep.server.views import current_view, describe_view, usage_report
from contextkeep.stores.base import Store

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["conversations"])

Ctx = Annotated[ServerContext, Depends(context)]
Conversation = Annotated[str, Depends(known_conversation)]
JSON = dict[str, Any]


@router.get("/health", summary="Liveness and configuration")
async def health(ck: Ctx) -> JSON:
    """The model the server budgets for and whether proxy mode is on."""
    capacity = ck.manager.capacity()
    return {
        "ok": True,
        "model": ck.manager.model.key,
        "context_window": capacity.window,
        "capacity_source": capacity.source.value,
        "proxy": ck.proxy is not None,
    }


def _proxied(ck: ServerContext, conversation_id: str) -> Sequence[Mapping[str, Any]]:
    """The calls this server proxied lately for the conversation (raw, oldest first)."""
    return ck.proxy.kept.get(conversation_id, ()) if ck.proxy is not None else ()


_RECORDED: weakref.WeakKeyDictionary[Store, dict[str, tuple[int, float]]] = weakref.WeakKeyDictionary()
"""Per store and conversation: the transcript length its newest compaction record was read at, and
that record's time. A conversation whose length did not change is not read again (the dashboard
lists every 5 s)."""


async def _recorded_at(store: Store, conversation_id: str, messages: int) -> float:
    known = _RECORDED.setdefault(store, {})
    if conversation_id not in known or known[conversation_id][0] != messages:
        state = await store.load_document(conversation_id, COMPACTION_DOCUMENT)
        known[conversation_id] = (messages, last_activity(state.data.get("records", ()), ()))
    return known[conversation_id][1]


@router.get("/conversations", summary="Every conversation in the store")
async def conversations(ck: Ctx, order: Literal["store", "recent"] = "store") -> list[JSON]:
    """Conversation ids with their transcript lengths, in the store's order or most recently active first.

    With `order=recent` each carries `active_at`: the Unix time of its newest compaction
    record or proxied call (0 when it has neither), and `live` (this server serves it);
    live conversations come first, then by `active_at`, newest first.
    """
    store = ck.manager.store
    listed: list[JSON] = []
    for c in await store.list_conversations():
        entry: JSON = {"id": c, "messages": await store.count_messages(c)}
        if order == "recent":
            recorded = await _recorded_at(store, c, entry["messages"])
            entry["active_at"] = max(recorded, last_activity((), _proxied(ck, c)))
            entry["live"] = ck.proxy is not None and ck.proxy.is_live(c)
        listed.append(entry)
    if order == "store":
        return listed
    return sorted(listed, key=lambda e: (e["live"], e["active_at"]), reverse=True)


@router.get("/conversations/{conversation_id}/status", summary="Latest context status and usage")
async def status(ck: Ctx, conversation_id: Conversation) -> JSON:
    """The local count of the current view (`context`) and the provider-confirmed usage (`usage`)."""
    async with ck.reader.open(conversation_id) as session:
        view = await current_view(session)
        state = session.state
        return {
            "conversation_id": conversation_id,
            "messages": len(session.transcript),
            "context": view.status.to_dict(),
            "usage": usage_report(session),
            "state_version": state.version,
            "compactions": len(state.records),
            "breaker_open": state.breaker_open,
            "live": ck.proxy is not None and ck.proxy.is_live(conversation_id),
        }


@router.get("/conversations/{conversation_id}/usage", summary="Confirmed usage of every scope")
async def usage(ck: Ctx, conversation_id: Conversation) -> list[JSON]:
    """The confirmed-usage state saved for each scope (agent id | agent version | model key).

    `served` marks the scope this server's own views and proxy use (`status` reports it in full).
    """
    store = ck.manager.store
    out = []
    for scope in await store.list_scopes(conversation_id, USAGE_DOCUMENT):
        doc = await store.load_document(conversation_id, USAGE_DOCUMENT, scope)
        state = UsageState.from_dict(doc.data, doc.version)
        out.append(
            {"scope": scope, "served": scope == ck.reader.scope, "version": doc.version, "valid": state.valid}
            | state.to_dict()
        )
    return out


@router.get("/conversations/{conversation_id}/view", summary="What the model sees next")
async def view(ck: Ctx, conversation_id: Conversation) -> JSON:
    """The current view, each message marked `summary`, `dropped`, `masked`, `truncated` or unchanged."""
    async with ck.reader.open(conversation_id) as session:
        return describe_view(await current_view(session), session.transcript)


@router.get("/conversations/{conversation_id}/calls", summary="Views sent at recent proxied calls")
async def calls(ck: Ctx, conversation_id: Conversation) -> list[JSON]:
    """Exactly what the model saw at each of the last 50 calls this server proxied (newest last)."""
    if ck.proxy is None:
        return []
    return list(ck.proxy.calls.get(conversation_id, ()))


@router.get("/conversations/{conversation_id}/history", summary="The conversation's past, for a replay")
async def history(ck: Ctx, conversation_id: Conversation) -> JSON:
    """What the dashboard replays on load, from the store and this server's recent calls.

    `window` and `capacity_source` (explicit, endpoint, upstream, provider_error, registry,
    config, unknown), the `budget` (window − reserved output), `trigger` and `target` lines in
    tokens; `calls`: the view tokens of each proxied call kept (newest last); `view_tokens`:
    the next call's; `saved`: tokens saved per layer (L0 = truncations in the current view);
    `events`: the events a watcher from the start would have seen (`replayed: true`).
    """
    async with ck.reader.open(conversation_id) as session:
        return await replay_history(session, await current_view(session), _proxied(ck, conversation_id))


@router.get("/conversations/{conversation_id}/compactions", summary="Compaction records and state")
async def compactions(ck: Ctx, conversation_id: Conversation) -> JSON:
    """Every compaction record (layer, reason, tokens before/after, references) and the current cursors."""
    async with ck.reader.open(conversation_id) as session:
        state = session.state.to_dict()
    return {
        "records": state.pop("records"),
        "summary": state.pop("summary"),
        "progress": state.pop("progress"),
        "state": state,
    }


@router.get("/conversations/{conversation_id}/messages", summary="A page of the transcript")
async def messages(
    ck: Ctx,
    conversation_id: Conversation,
    after: Annotated[int, Query(ge=0, le=2**31)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> JSON:
    """Messages from position `after` on, at most `limit`; `next` is the `after` of the next page."""
    store = ck.manager.store
    page = await store.load_messages(conversation_id, after=after, limit=limit)
    total = await store.count_messages(conversation_id)
    return {
        "after": after,
        "total": total,
        "next": after + len(page) if after + len(page) < total else None,
        "messages": [message_to_dict(m) for m in page],
    }


@router.get(
    "/conversations/{conversation_id}/references/{reference:path}",
    summary="Offloaded content",
    response_class=PlainTextResponse,
)
async def reference(
    ck: Ctx,
    conversation_id: Conversation,
    reference: str,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=2**31)] = None,
) -> PlainTextResponse:
    """The text behind one of the conversation's references (paths outside its folder are refused)."""
    workspace = ck.manager.workspace
    try:
        own = await workspace.resolve(conversation_id, reference)
        text = await workspace.read(own, offset=offset, limit=limit)
    except UnsafePathError as exc:
        raise HTTPException(400, str(exc)) from exc
    except WorkspaceError as exc:
        raise HTTPException(404, str(exc)) from exc
    return PlainTextResponse(text)
