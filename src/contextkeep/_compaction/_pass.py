"""One compaction pass: what every layer reads, and the outcome it changes.

A layer never writes the outcome's view or records itself: it proposes a new state,
and the pass measures the view that state gives, skips a change that leaves the view
as it was, and records each real one with its own before/after tokens and a status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contextkeep._budget import Budget
from contextkeep._compaction.builder import ViewBuilder
from contextkeep._compaction.state import CompactionRecord, CompactionState
from contextkeep._config import ContextConfig
from contextkeep._errors import SummaryError
from contextkeep._events import CompressionFailed, ContextStatus
from contextkeep._messages import Message
from contextkeep._rounds import Round
from contextkeep._summarizers.base import Summarizer
from contextkeep._tokens import IncrementalCounter, TokenCounter

__all__ = ["Outcome", "PassContext", "PassResources", "Tools", "measure"]

logger = logging.getLogger("contextkeep.compaction")

Tools = Sequence[Mapping[str, Any]] | None


@dataclass(slots=True)
class Outcome:
    """The result of one compaction pass."""

    state: CompactionState
    """The new state (unsaved)."""
    view: list[Message]
    """The view it gives."""
    tokens: int
    """Its prompt tokens."""
    statuses: list[ContextStatus] = field(default_factory=list)
    """One status after each layer that changed the view."""
    offloads: list[list[Message]] = field(default_factory=list)
    """Message spans to offload before the state is saved."""
    failures: list[CompressionFailed] = field(default_factory=list)
    """Summary failures met on the way."""
    seconds: float = 0.0
    """Time the pass took, summariser calls excluded."""
    summary_seconds: float = 0.0
    """Time the summariser took: its own CPU time, and waiting (for its model, or for the CPU)."""
    summary_cpu_seconds: float = 0.0
    """The part of `summary_seconds` the summariser itself ran (see `_summary._timed_summary`)."""
    error: SummaryError | None = None
    """Under the `fail` strategy, the summary failure to raise once the state is saved."""
    nothing_to_compress: bool = False
    """Compaction was due but every round was protected (reported as a failure, as Agents-Flex does)."""
    into_current_turn: bool = False
    """L4 cut into the current turn (the one place that may)."""

    @property
    def changed(self) -> bool:
        """Whether any layer changed the view."""
        return bool(self.statuses)

    @property
    def layers(self) -> tuple[str, ...]:
        """The layer of each change to the view, in order (a layer that changed it twice is named twice)."""
        return tuple(s.compact_layer or "" for s in self.statuses)


@dataclass(frozen=True, slots=True)
class PassResources:
    """A conversation's collaborators every pass uses (built once, with its compactor)."""

    counter: TokenCounter
    """Counts views."""
    builder: ViewBuilder
    """Derives the view of a state."""
    reference: Callable[[Sequence[Message]], str]
    """Where messages that leave the view are offloaded (a pure function of the messages)."""
    summarizer: Summarizer | None = None
    """The summariser of layer 3."""
    fallback: Summarizer | None = None
    """The summariser used when it fails (the extractive one, under the `extractive` strategy)."""
    conversation_id: str = ""
    """The conversation, for events and logs."""
    status_context: Mapping[str, Any] = field(default_factory=dict)
    """Extra `ContextStatus` fields (the model key)."""
    incremental: IncrementalCounter | None = field(init=False, default=None)
    """`counter` again, if it remembers its last prompt's per-message totals."""

    def __post_init__(self) -> None:
        # Checked once: a runtime protocol check costs more than the lookup it saves.
        incremental = self.counter if isinstance(self.counter, IncrementalCounter) else None
        object.__setattr__(self, "incremental", incremental)


def measure(
    resources: PassResources,
    transcript: Sequence[Message],
    rounds: Sequence[Round],
    state: CompactionState,
    tools: Tools,
    config: ContextConfig | None = None,
) -> tuple[list[Message], int]:
    """The view for `state` and its prompt tokens."""
    view = resources.builder.build(transcript, rounds, state, config=config)
    return view, resources.counter.count_prompt(view, tools)


@dataclass(slots=True)
class PassContext:
    """One compaction pass: its inputs, and the outcome the layers change.

    A layer reads the inputs and the outcome so far; it changes the view only through
    :meth:`propose`, and bookkeeping the view does not show through :meth:`amend`.
    """

    transcript: Sequence[Message]
    """Every message of the conversation, exactly as added (never edited)."""
    rounds: Sequence[Round]
    """The transcript's rounds (compaction boundaries fall only between them)."""
    budget: Budget
    """The window, the reserved output and the thresholds in tokens."""
    config: ContextConfig
    """This pass's configuration (the session's, or with one call's overrides)."""
    tools: Tools
    """The tool definitions sent with the view (they count towards it)."""
    reason: str
    """Why the pass runs (a :class:`CompressionReason`)."""
    target: int
    """Tokens the pass aims at or under."""
    outcome: Outcome
    """The state, view and tokens so far, and what the pass met on the way."""
    resources: PassResources
    """The conversation's counter, builder, references and summarisers."""
    protect: int = 0
    """Transcript index from which L1–L3 keep everything verbatim (recent rounds, protected turns)."""
    forced: bool = False
    """A deferred compression is due: the summary runs even when the view is under the target."""

    @property
    def state(self) -> CompactionState:
        """The current state."""
        return self.outcome.state

    @property
    def view(self) -> list[Message]:
        """The current view."""
        return self.outcome.view

    @property
    def tokens(self) -> int:
        """The current view's prompt tokens."""
        return self.outcome.tokens

    @property
    def counter(self) -> TokenCounter:
        """The conversation's token counter."""
        return self.resources.counter

    @property
    def conversation_id(self) -> str:
        """The conversation."""
        return self.resources.conversation_id

    def aiming_at(self, target: int) -> PassContext:
        """The same pass (sharing its outcome) with another target."""
        return replace(self, target=target)

    def reference(self, messages: Sequence[Message]) -> str:
        """Where `messages` are (or will be) offloaded."""
        return self.resources.reference(messages)

    def offload(self, messages: Sequence[Message]) -> str:
        """Have `messages` offloaded before the state is saved; returns their reference."""
        self.outcome.offloads.append(list(messages))
        return self.reference(messages)

    def measure(self, state: CompactionState) -> tuple[list[Message], int]:
        """The view `state` gives and its prompt tokens (without changing the outcome)."""
        return measure(self.resources, self.transcript, self.rounds, state, self.tools, self.config)

    def amend(self, state: CompactionState) -> None:
        """Replace the state without measuring: for fields the view does not show (failures, breaker)."""
        self.outcome.state = state

    def propose(
        self,
        layer: str,
        state: CompactionState,
        *,
        span: tuple[int, int] = (0, 0),
        references: Sequence[str] = (),
    ) -> bool:
        """Make `state` the pass's state; when its view differs, record the change under `layer`.

        `span` is the transcript range `[first, last)` the change acts on; `references` say
        where what left the view can be read. Returns whether the view changed (a state that
        moves a boundary over nothing it shortens is kept, but not recorded).
        """
        out = self.outcome
        if state == out.state:
            return False
        if state.progress_shown != len(state.progress):  # the prefix changes anyway: show progress now
            state = state.evolve(progress_shown=len(state.progress))
        view, tokens = self.measure(state)
        if tokens == out.tokens and view == out.view:
            out.state = state
            return False
        name = str(layer)  # plain text in records and events, whichever enum named it
        record = CompactionRecord(name, self.reason, out.tokens, tokens, span[0], span[1], tuple(references))
        out.state = state.evolve(records=(*state.records, record))
        out.view, out.tokens = view, tokens
        status = ContextStatus.measure(
            tokens,
            self.budget,
            source=self.counter.source,
            layer=name,
            conversation_id=self.conversation_id,
            **self.resources.status_context,
        )
        out.statuses.append(status)
        logger.info(
            "%s %s: %d -> %d tokens (%s)",
            self.conversation_id,
            name,
            record.tokens_before,
            tokens,
            self.reason,
        )
        return True

    def keep_tokens(self) -> int:
        """Tokens of the newest rounds that dropping and summarising leave verbatim."""
        config, budget = self.config, self.budget
        if config.reserve_ratio is not None and budget.context_window is not None:
            return int(config.reserve_ratio * budget.context_window)
        # DB-GPT's floor was set for 120k windows; in a small window it would leave nothing to compact.
        cap = budget.tokens_at(config.min_keep_tokens_max_ratio)
        return config.min_keep_tokens if cap is None else min(config.min_keep_tokens, cap)

    def round_tokens(self, rounds: Sequence[Round]) -> list[int]:
        """The view tokens of each of `rounds` (rounds from the cut on, which the view shows)."""
        view, transcript, counter = self.outcome.view, self.transcript, self.counter
        # The view ends with the transcript's tail (from the cut), so index arithmetic finds each message.
        shift = len(view) - len(transcript)
        incremental = self.resources.incremental
        totals = incremental.last_totals(view) if incremental is not None else None
        if totals is not None:  # the counter's last prompt is this view: reuse its counts
            return [
                totals[shift + r.end - 1] - (totals[shift + r.start - 1] if shift + r.start else 0)
                for r in rounds
            ]
        return [sum(counter.count_message(view[shift + i]) for i in range(r.start, r.end)) for r in rounds]
