"""Cross-process events: poll the store and synthesize events from what changed.

Another process (``contextkeep demo``, an agent using the library) writes the same
store but its events stay in its own process. Every `interval` seconds the watcher
loads each conversation (incrementally) and compares transcript length, the
compaction state's version, records and pending flag, and the usage version with
what it saw last; on a change it publishes, in order: ``context.compression.completed``
per new record, ``context.compression.required`` when the flag was set,
``model.completed`` when a reply was recorded with new usage, and ``context.status``
measured on the current view. Conversations this process serves are skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from contextkeep._baseline import figures
from contextkeep._events import CompressionCompleted, CompressionRequired, Event, ModelCompleted
from contextkeep._session import Session
from contextkeep.server.hub import EventHub
from contextkeep.server.reader import Reader
from contextkeep.server.views import current_view

__all__ = ["StoreWatcher"]

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
    ) -> None:
        self.reader = reader
        self.hub = hub
        self.interval = interval
        self.live = live
        self._seen: dict[str, _Seen] = {}
        self._primed = False

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
        """One pass over every conversation."""
        for conversation in await self.reader.manager.store.list_conversations():
            async with self.reader.open(conversation) as session:
                now = _seen(session)
                # Conversations found on the first pass are history, not news.
                before = self._seen.get(conversation, _Seen() if self._primed else now)
                self._seen[conversation] = now
                if now == before or self.live(conversation):
                    continue
                for event in await _events(session, before, now):
                    self.hub.publish_event(event, synthesized=True)
        self._primed = True


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
