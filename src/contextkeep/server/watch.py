"""Cross-process events: poll the store and synthesize events from what changed.

Another process (``contextkeep demo``, an agent using the library) writes the same
store but its events stay in its own process. Every `interval` seconds the watcher
checks the conversations an open event stream follows, cheaply (transcript length and the
versions of the compaction and usage documents, no transcript loaded); only a conversation
that changed is loaded (incrementally), and it publishes, in order:
``context.compression.completed`` per new record, ``context.compression.required`` when
the flag was set, ``model.completed`` when a reply was recorded with new usage, and
``context.status`` measured on the current view. Conversations this process serves are skipped.

With no stream open the store is not touched at all. A stream following every conversation
(the dashboard's) does not make each poll scan the store: once the stream opens, every
conversation is read once (what it holds then is history); then the conversation list is
read every `list_interval` seconds, conversations that changed lately or appeared since
are checked every poll, and the others in turns of `sweep` per poll.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contextkeep._baseline import USAGE_DOCUMENT, figures
from contextkeep._documents import COMPACTION_DOCUMENT
from contextkeep._events import CompressionCompleted, CompressionRequired, Event, ModelCompleted
from contextkeep._session import Session
from contextkeep.server.hub import EventHub
from contextkeep.server.reader import Reader
from contextkeep.server.views import current_view

__all__ = ["StoreWatcher", "replayed_events"]

logger = logging.getLogger("contextkeep.server")


@dataclass(frozen=True, slots=True)
class _Seen:
    messages: int = 0
    state_version: int = 0
    records: int = 0
    required: bool = False
    usage_version: int = 0


def _seen(session: Session) -> _Seen:
    state = session.state
    return _Seen(
        len(session.transcript),
        state.version,
        len(state.records),
        state.compression_required,
        session.usage.version,
    )


class StoreWatcher:
    """Polls the store; see the module docs."""

    def __init__(
        self,
        reader: Reader,
        hub: EventHub,
        *,
        interval: float = 0.5,
        live: Callable[[str], bool] = lambda _: False,
        sweep: int = 100,
        list_interval: float = 5.0,
        hot_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.hub = hub
        self.interval = interval
        self.live = live
        self.sweep = sweep
        self.list_interval = list_interval
        self.hot_seconds = hot_seconds
        self._clock = clock
        # A conversation absent from `_seen` is history when first checked; one seeded with
        # `_Seen()` (it appeared while watched) has everything it holds as news.
        self._seen: dict[str, _Seen] = {}
        self._changed: dict[str, float] = {}
        self._listed: list[str] | None = None
        self._listed_at = 0.0
        self._turn = 0

    async def run(self) -> None:
        """Poll until cancelled; a failing poll is logged and retried."""
        while True:
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("polling the store failed")
            await asyncio.sleep(self.interval)

    async def poll(self) -> None:
        """One pass over the conversations that are watched and due."""
        watched = self.hub.watched()
        if watched is not None and not watched:  # nobody watches: the next watcher starts afresh
            self._seen.clear()
            self._changed.clear()
            self._listed = None
            return
        due = sorted(watched) if watched is not None else await self._due()
        for conversation in due:
            await self._check(conversation)

    async def _due(self) -> list[str]:
        """Every conversation's turn comes: the recently changed and new ones now, the rest by turns."""
        now = self._clock()
        if self._listed is None or now - self._listed_at >= self.list_interval:
            listed = await self._list(now)
        else:
            listed = self._listed
        for conversation, at in list(self._changed.items()):
            if now - at > self.hot_seconds:
                del self._changed[conversation]
        return sorted(set(self._changed).union(self._turns(listed)))

    async def baseline(self, conversation: str | None) -> None:
        """Take what the store holds now as history for a new watcher of `conversation` (all: None).

        A stream calls it before it reports itself connected, so whatever happens after that is
        news, even before the next poll.
        """
        if conversation is None:
            if self._listed is None:
                await self._list(self._clock())
        elif conversation not in self._seen:
            self._seen[conversation] = await self._signature(conversation)

    async def _list(self, now: float) -> list[str]:
        listed = await self.reader.manager.store.list_conversations()
        fresh = set(listed).difference(self._listed or ()).difference(self._seen)
        for conversation in sorted(fresh):
            if self._listed is None:  # what the store holds when watching starts is history
                self._seen[conversation] = await self._signature(conversation)
            else:  # it appeared while watched: all it holds is news
                self._seen[conversation] = _Seen()
                self._changed[conversation] = now
        self._listed, self._listed_at = listed, now
        return listed

    def _turns(self, listed: Sequence[str]) -> list[str]:
        if len(listed) <= self.sweep:
            return list(listed)
        start = self._turn % len(listed)
        self._turn = start + self.sweep
        return [listed[(start + i) % len(listed)] for i in range(self.sweep)]

    async def _check(self, conversation: str) -> None:
        if self.live(conversation):  # its events go out live; once it is not, it starts afresh
            self._seen.pop(conversation, None)
            self._changed.pop(conversation, None)
            return
        now = await self._signature(conversation)
        before = self._seen.setdefault(conversation, now)
        if now == before:
            return
        self._seen[conversation] = now
        self._changed[conversation] = self._clock()
        async with self.reader.open(conversation) as session:
            self._seen[conversation] = _seen(session)  # it may be newer than the signature
            for event in await _events(session, before, self._seen[conversation]):
                self.hub.publish_event(event, synthesized=True)

    async def _signature(self, conversation: str) -> _Seen:
        """What `_seen` of a loaded session would say, read without loading the transcript."""
        store = self.reader.manager.store
        messages = await store.count_messages(conversation)
        state = await store.load_document(conversation, COMPACTION_DOCUMENT)
        usage = await store.load_document(conversation, USAGE_DOCUMENT, self.reader.scope)
        return _Seen(
            messages,
            state.version,
            len(state.data.get("records", ())),
            bool(state.data.get("compression_required", False)),
            usage.version,
        )


async def replayed_events(session: Session) -> list[Event]:
    """What a watcher that saw the conversation from its start would have published, for a replay."""
    return await _events(session, _Seen(), _seen(session))


async def _events(session: Session, before: _Seen, now: _Seen) -> list[Event]:
    conversation, state, usage = session.conversation_id, session.state, session.usage
    events: list[Event] = [
        CompressionCompleted(
            conversation_id=conversation,
            timestamp=r.at,
            layer=r.layer,
            compression_reason=r.reason,
            tokens_before=r.tokens_before,
            tokens_after=r.tokens_after,
            references=r.references,
            usage_status=usage.status.value,
            compression_required=state.compression_required,
            usage_baseline_valid=usage.valid,
        )
        for r in state.records[before.records :]
    ]
    if now.required and not before.required:
        events.append(
            CompressionRequired(
                conversation_id=conversation,
                reason=state.compression_reason or "THRESHOLD_REACHED",
                next_call_baseline_tokens=usage.baseline,
                threshold_ratio=session.config.compression_threshold_ratio,
            )
        )
    if now.usage_version != before.usage_version and now.messages > before.messages:
        events.append(_completed(session))
    events.append((await current_view(session)).status)
    return events


def _completed(session: Session) -> ModelCompleted:
    usage, budget, model = session.usage, session.budget(), session.model
    numbers = figures(usage, budget.context_window, budget.reserved_output)
    return ModelCompleted(
        conversation_id=session.conversation_id,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        usage_source="PROVIDER_CONFIRMED" if usage.valid else "UNAVAILABLE",
        model_key=usage.model_key or model.key,
        context_window_tokens=budget.context_window,
        model_max_output_tokens=model.max_output_tokens,
        reserved_output_tokens=budget.reserved_output,
        next_call_baseline_tokens=usage.baseline if usage.valid else None,
        baseline_ratio=numbers.ratio,
        remaining_baseline_tokens=numbers.remaining,
        compression_required=session.state.compression_required,
        usage_baseline_valid=usage.valid,
        usage_status=usage.status.value,
    )
