"""What a recorded reply's usage changes: the counter's calibration, the confirmed baseline, compaction.

Provider-confirmed usage anchors the count: a calibrating counter learns the provider's count of
the prompt it served, and complete usage sets the confirmed baseline; when its ratio reaches
`compression_threshold_ratio`, compaction is scheduled before the next model call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

from contextkeep._budget import Budget
from contextkeep._compaction.builder import ViewBuilder
from contextkeep._compaction.state import CompactionState
from contextkeep._documents import Documents, UsageSave
from contextkeep._emitter import Emitter
from contextkeep._tokens import CalibratingCounter, PromptCounter
from contextkeep._tokens.framing import Tools
from contextkeep._transcript import Transcript
from contextkeep._usage import Usage
from contextkeep._usage_policy import UsagePolicy
from contextkeep.stores.base import DocumentWrite

__all__ = ["Prepared", "ReplySave", "ReplyUsage"]


class Prepared(NamedTuple):
    """The request of the last `prepare`: what counting ahead and the usage figures go by."""

    tools: Tools | None
    max_tokens: int | None


class ReplyUsage:
    """One conversation's handling of the usage each reply reports (see `Session.record`)."""

    def __init__(
        self,
        counter: PromptCounter,
        builder: ViewBuilder,
        transcript: Transcript,
        documents: Documents,
        policy: UsagePolicy,
        events: Emitter,
    ) -> None:
        # A protocol isinstance costs ~0.1 ms: decided once, not on every recorded reply.
        self._calibrating = counter if isinstance(counter, CalibratingCounter) else None
        self._builder, self._log, self._docs = builder, transcript, documents
        self._policy, self._events = policy, events

    def calibrate(self, usage: Usage, prepared: Prepared | None) -> None:
        """Give a calibrating counter the provider's count of the prompt `prepared` last.

        Call it before the reply joins the transcript: the view is then the prompt it counted.
        """
        if self._calibrating is not None and usage.input_tokens and prepared is not None:
            view = self._builder.build(self._log.messages, self._log.rounds, self._docs.compaction)
            self._calibrating.observe(view, prepared.tools, usage.input_tokens)

    def saved_with_reply(self, usage: Usage) -> ReplySave:
        """The new usage state as a save the reply's append carries (one store write where it can)."""
        return ReplySave(self._docs.usage_save(lambda state: self._policy.observe(state, usage)))

    async def observe(
        self,
        usage: Usage,
        prepared: Prepared | None,
        budget: Callable[[int | None], Budget],
        update_state: Callable[[Callable[[CompactionState], CompactionState]], Awaitable[CompactionState]],
        saved: ReplySave | None = None,
    ) -> None:
        """The usage policy on a reply: the new baseline, then a deferred compaction if it is due.

        `budget` gives the next call's budget for a `max_tokens`; `update_state` changes the compaction
        state; `saved` is the save the reply's append carried (when it settled, nothing is saved again).
        """
        docs, policy = self._docs, self._policy
        if saved is None or not saved.settled:
            await docs.save_usage(policy.observe(docs.usage, usage))
        now = budget(prepared.max_tokens if prepared is not None else None)
        due = policy.due(docs.usage, now, docs.compaction)
        if due is not None:
            await update_state(due.apply)
            await self._events.aemit(due.event(docs.usage))
        completed = policy.completed(usage, docs.usage, now, docs.compaction.compression_required)
        await self._events.aemit(completed)


class ReplySave:
    """The usage save a reply's append carries, and whether the append settled it.

    Settled: written with the reply, or nothing to change. `ReplyUsage.observe` then has nothing
    to save (the usual case: one store write per recorded reply, no second look at the state).
    """

    def __init__(self, save: UsageSave) -> None:
        self._save = save
        self.settled = False
        """Whether the state the append last looked at needs no other save."""

    def write(self) -> DocumentWrite | None:
        """The save to make with the append (`None`: the state already says it)."""
        write = self._save.write()
        self.settled = write is None
        return write

    def written(self, write: DocumentWrite) -> None:
        """`write` was stored with the append."""
        self._save.written(write)
        self.settled = True
