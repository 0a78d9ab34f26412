"""Deriving the view: what the model sees, from (transcript, compaction state, config).

The view is, in order: the system preamble (through the `on_system_prompt`
hooks), the pinned first user message, the summary, the dropped-rounds marker,
and every round from the cut on, with old tool outputs masked (L1) and over-long
ones truncated (L0). Every derived message is kept per transcript index; when a
boundary moves, only the messages between its old and new place are derived
again, so building the view for call N costs work proportional to what was
appended since call N-1 (or to what the compaction changed).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import replace

from contextkeep._compaction._bounds import first_droppable, preamble_end
from contextkeep._compaction._preview import UsedLines
from contextkeep._compaction.ingest import truncate_tool_result
from contextkeep._compaction.render import detail_reference, dropped_marker, masked_output
from contextkeep._compaction.state import CompactionState
from contextkeep._compaction.system_prompt import SystemPrompt, SystemPromptHook, default_progress_hook
from contextkeep._config import ContextConfig
from contextkeep._lineage import Lineage, ViewList, lineage_of
from contextkeep._messages import ImagePart, Message, TextPart
from contextkeep._rounds import Round, current_turn_start
from contextkeep._tokens import PromptCounter, TokenCounter

__all__ = [
    "REF_KEY",
    "SystemPromptHook",
    "ViewBuilder",
    "default_progress_hook",
]

REF_KEY = "ck_ref"
"""Metadata key of a message's (or part's) offload reference, set when it is added."""


class ViewBuilder:
    """Builds views for one conversation, caching derived messages between calls."""

    def __init__(
        self,
        config: ContextConfig,
        counter: TokenCounter,
        hooks: Sequence[SystemPromptHook] = (default_progress_hook,),
        window: int | None = None,
    ) -> None:
        self.config = config
        self.counter = counter
        self._counted = counter.counted if isinstance(counter, PromptCounter) else None
        """A message's count from when the counter last encoded it (None: a counter keeping none)."""
        self.system = SystemPrompt(hooks)
        """The `on_system_prompt` hooks and their resolved results."""
        self.window = window
        """The model's context window (layer 0's limit is capped at a share of it)."""
        # Every transcript message from `_base` on, as the boundaries `_marks` say to show it.
        self._base = 0
        self._marks = (0, 0)
        self._masked: tuple[int, ...] = ()
        self._shown: list[Message] = []
        self._varying: list[int] = []
        """Positions in `_shown` of the messages the boundaries act on (long tool outputs, media)."""
        self._derived: dict[tuple[str, object, bool, bool, tuple[str, ...]], Message] = {}
        self._sources: dict[str, tuple[Message, int]] = {}
        """Key of each shown long tool output -> its transcript message and index (`masked_shadow`)."""
        self._transcript: Sequence[Message] = ()
        """The transcript last built from (a session's, which only grows)."""
        self._heads: dict[tuple[str, str | None, object, str], Message] = {}
        self._savings: dict[tuple[str, object, int], int] = {}
        self._used_lines = UsedLines()
        self._derived_for = _derivation(config, window)
        self._derived_with: tuple[ContextConfig, int | None] = (config, window)
        """The config and window `_derived_for` was worked out for (a build asks twice per view)."""
        self._token = object()  # lineage: see `contextkeep._lineage`
        self._view = ViewList()
        """The last view built, extended in place while its lineage holds."""
        self._head: list[Message] = []
        self._start = 0

    def _forget_if_reconfigured(self, config: ContextConfig) -> None:
        """Derived messages depend on the preview size and the tool-result limit: new ones start over."""
        seen, window = self._derived_with, self.window
        if config is seen[0] and window == seen[1]:  # configs are immutable
            return
        derivation, self._derived_with = _derivation(config, window), (config, window)
        if derivation != self._derived_for:
            self._derived_for, self._shown, self._varying = derivation, [], []
            self._new_lineage()
            self._derived.clear()
            self._sources.clear()

    async def resolve_system(
        self,
        transcript: Sequence[Message],
        rounds: Sequence[Round],
        state: CompactionState,
        *,
        config: ContextConfig | None = None,
    ) -> None:
        """Run the `on_system_prompt` hooks (async ones awaited) for the views `state` leads to.

        Call it before building whenever the transcript or state may have changed (sessions do
        when they load); building then only reads the results. `config` is the one the views
        will be built with (by default the builder's).
        """
        config = self.config if config is None else config
        if preamble_end(rounds):
            await self.system.resolve(transcript[0].text, state.progress, self._progress_shown(state, config))

    def build(
        self,
        transcript: Sequence[Message],
        rounds: Sequence[Round],
        state: CompactionState,
        *,
        config: ContextConfig | None = None,
    ) -> list[Message]:
        """The view for `state` under `config` (by default the builder's): a pure function, cached.

        While the lineage holds (`contextkeep._lineage`), the list is the last one, extended in
        place with what was appended: building costs what was appended, not a copy of the history.
        Callers that keep a view past the next build keep its length (`View` does).
        """
        config = self.config if config is None else config
        head = self.head(transcript, rounds, state, config=config)
        shown, start = self._body(transcript, rounds, state, config)
        token, view = self._lineage(head, start), self._view
        held = len(view) - len(head)  # how many shown messages the last view holds
        if (kept := lineage_of(view)) is None or kept.token is not token or len(shown) - start < held:
            view = self._view = ViewList(head)
            held = 0
        list.extend(view, shown[start + held :] if start or held else shown)
        view.lineage = Lineage(token, len(view))
        return view

    def _lineage(self, head: list[Message], start: int) -> object:
        """The lineage token of views of `head` then the shown messages from `start`: kept while both stay."""
        last = self._head
        same = len(head) == len(last) and all(a is b for a, b in zip(head, last, strict=True))
        if start != self._start or not same:
            self._token, self._head, self._start = object(), head, start
        return self._token

    def _new_lineage(self) -> None:
        """The shown messages changed other than by appending: later views start a new lineage."""
        self._token = object()

    def head(
        self,
        transcript: Sequence[Message],
        rounds: Sequence[Round],
        state: CompactionState,
        *,
        config: ContextConfig | None = None,
    ) -> list[Message]:
        """Preamble, pinned task, summary and dropped-rounds marker."""
        config = self.config if config is None else config
        self._forget_if_reconfigured(config)
        out: list[Message] = []
        preamble = preamble_end(rounds)
        for i in range(preamble):
            m = transcript[i]
            if i == 0:
                text = self.system.text(m.text, state.progress[: self._progress_shown(state, config)])
                m = m if text == m.text else self._made(m, text)
            out.append(m)
        if state.minimal:
            return out
        start = first_droppable(rounds, config.pin_first_user)
        cut = max(state.cut, start)
        if cut > start and config.pin_first_user and start > preamble:
            pinned = range(preamble, start)
            out.extend(self._derive(transcript[i], i, state, config, transcript) for i in pinned)
        if state.summary is not None:
            text = config.summary_template.format(summary=state.summary.text)
            if state.summary.reference:
                text += "\n" + detail_reference(state.summary.reference)
            out.append(self._made(Message(config.summary_role, metadata={"ck_kind": "summary"}), text))
        summarised = state.summary.cursor if state.summary else 0
        if state.drop_cursor > max(summarised, start):
            first = max(summarised, start)
            dropped = sum(1 for r in rounds if first <= r.start < state.drop_cursor)
            text = dropped_marker(
                dropped,
                transcript[first].id or str(first),
                transcript[state.drop_cursor - 1].id or "",
                state.drop_reference,
            )
            if state.drop_digest:
                text += "\n" + state.drop_digest
            out.append(self._made(Message("user", metadata={"ck_kind": "dropped"}), text))
        turn = current_turn_start(rounds) if config.keep_recent_turns is None else None
        if turn is not None and start <= turn < cut:  # the current task stays in view, whatever is cut
            out.append(self._derive(transcript[turn], turn, state, config, transcript))
        return out

    @staticmethod
    def _progress_shown(state: CompactionState, config: ContextConfig) -> int:
        """How many completed steps the system prompt shows (`progress_in_prompt`)."""
        return len(state.progress) if config.progress_in_prompt == "always" else state.progress_shown

    def body(
        self,
        transcript: Sequence[Message],
        rounds: Sequence[Round],
        state: CompactionState,
        *,
        config: ContextConfig | None = None,
    ) -> list[Message]:
        """Rounds from the cut on, masked and truncated as the state says."""
        shown, start = self._body(transcript, rounds, state, self.config if config is None else config)
        return shown[start:]

    def _body(
        self,
        transcript: Sequence[Message],
        rounds: Sequence[Round],
        state: CompactionState,
        config: ContextConfig,
    ) -> tuple[list[Message], int]:
        """The shown messages (kept: callers copy what they hand out), and where the body starts in them."""
        self._forget_if_reconfigured(config)
        self._transcript = transcript
        base = preamble_end(rounds)
        start = max(state.cut, first_droppable(rounds, config.pin_first_user)) if state.cut else base
        marks = (state.mask_boundary, max(state.mask_boundary, state.image_boundary))
        shown, varying = self._shown, self._varying
        if base != self._base or len(shown) > len(transcript) - base:
            self._base, shown, varying = base, [], []  # a different conversation shape: start over
            self._new_lineage()
        elif marks != self._marks or state.masked != self._masked:
            self._rederive(transcript, base, state, marks, config)
            self._new_lineage()
        self._marks, self._masked = marks, state.masked
        for i in range(base + len(shown), len(transcript)):
            m = transcript[i]
            if self._maskable(m, config) or not (m.content is None or isinstance(m.content, str)):
                varying.append(i - base)
            shown.append(self._derive(m, i, state, config, transcript))
        self._shown, self._varying = shown, varying
        return shown, start - base

    def _rederive(
        self,
        transcript: Sequence[Message],
        base: int,
        state: CompactionState,
        marks: tuple[int, int],
        config: ContextConfig,
    ) -> None:
        """Derive again the shown messages whose masking the new state changes."""
        shown, varying = self._shown, self._varying
        if marks != self._marks:
            # Only long tool outputs and media between the old and the new boundaries change how they show.
            low = max(min(*marks, *self._marks) - base, 0)
            high = min(max(*marks, *self._marks) - base, len(shown))
            for j in varying[bisect_left(varying, low) : bisect_left(varying, high)]:
                shown[j] = self._derive(transcript[base + j], base + j, state, config, transcript)
        for i in set(state.masked).symmetric_difference(self._masked):  # masked (or unmasked) one by one
            if 0 <= i - base < len(shown):
                shown[i - base] = self._derive(transcript[i], i, state, config, transcript)

    def _made(self, base: Message, text: str) -> Message:
        """`base` with `text`, the same object while the text stays (the head is rebuilt every call)."""
        key = (base.key, base.id, base.metadata.get("ck_kind"), text)
        made = self._heads.get(key)
        if made is None:
            if len(self._heads) > 256:
                self._heads.clear()
            made = self._heads[key] = base.with_text(text)
        return made

    def as_added(self, m: Message, index: int, *, config: ContextConfig | None = None) -> Message:
        """How `m`, added at transcript index `index`, shows before any compaction reaches it (layer 0)."""
        return self._derive(m, index, _NOTHING_COMPACTED, config)

    def masked_shadow(self, shown: Message) -> Message | None:
        """The masked form of a tool output the view shows verbatim now (None for anything else).

        The token counter's `warm` counts it in the framing context its message was counted in,
        so the compaction pass that masks the message finds its count cached (and its used lines).
        """
        found = self._sources.get(shown.key)
        if found is None:
            return None
        source, index = found
        return self._derive(source, index, _MASK_ALL, transcript=self._transcript, shadow=True)

    def shadow_settled(self, shown: Message) -> bool:
        """Whether `masked_shadow(shown)` is final: a preview's used lines wait for the messages after it."""
        found = self._sources.get(shown.key)
        if found is None:
            return True
        source, index = found
        return self._used_lines.settled(source, index, self._transcript, self.config)

    def _derive(
        self,
        m: Message,
        index: int,
        state: CompactionState,
        config: ContextConfig | None = None,
        transcript: Sequence[Message] = (),
        *,
        shadow: bool = False,
    ) -> Message:
        """A transcript message as the view shows it (cached: a compaction pass re-derives many).

        `shadow`: its masked form even where masking would not pay (a pass's config may differ).
        `transcript` (holding `m` at `index`) gives a masked preview the lines the agent used.
        """
        config = self.config if config is None else config
        # Normalised flags: a message that masking cannot shorten shares one cache entry.
        masked = (index < state.mask_boundary or index in state.masked) and (
            self._pays(m, config) or (shadow and self._maskable(m, config))
        )
        media = index < max(state.mask_boundary, state.image_boundary) and bool(m.media)
        used = (
            self._used_lines.of(m, index, transcript, config, _reference(m)) if masked and transcript else ()
        )
        key = (m.key, m.metadata.get(REF_KEY), masked, media, used)
        cached = self._derived.get(key)
        missed = cached is None
        if cached is None:
            if len(self._derived) > 16_384:
                self._derived.clear()
                self._sources.clear()
                self._savings.clear()
            cached = self._derived[key] = self._transform(m, masked, media, config, used)
        # A build knows the index (an ingest may not: a batch is derived before it is appended).
        if not masked and (missed or transcript) and self._maskable(m, config):
            self._sources[cached.key] = (m, index)
        return cached if cached.id == m.id else cached.with_id(m.id)

    @staticmethod
    def _maskable(m: Message, config: ContextConfig) -> bool:
        return m.role == "tool" and len(m.text) > config.truncated_observation_max_chars

    def _pays(self, m: Message, config: ContextConfig) -> bool:
        """Masking `m` saves at least `mask_min_saving_tokens` (0: mask whatever it saves)."""
        if not self._maskable(m, config):
            return False
        key = (m.key, m.metadata.get(REF_KEY), config.truncated_observation_max_chars)
        saving = self._savings.get(key)
        if saving is None:
            # Estimated by length (a preview's own encoding is left to the pass that shows it), from
            # the count the result had in a view: encoding it again was most of counting ahead's CPU.
            shown = self._transform(m, False, False, config)
            preview = masked_output(m.text, config.truncated_observation_max_chars, _reference(m))
            counted = self._counted(shown) if self._counted is not None else None
            tokens = self.counter.count_text(shown.text) if counted is None else counted
            saving = self._savings[key] = int(tokens - tokens * len(preview) / max(len(shown.text), 1))
        return config.mask_min_saving_tokens == 0 or saving >= config.mask_min_saving_tokens

    def _transform(
        self, m: Message, masked: bool, media: bool, config: ContextConfig, used: Sequence[str] = ()
    ) -> Message:
        if m.role == "tool":
            reference = m.metadata.get(REF_KEY)
            text = m.text
            if masked:
                limit = config.truncated_observation_max_chars
                m = m.with_text(masked_output(text, limit, _reference(m), used))
            else:
                limit = config.result_limit(self.window)
                truncated = truncate_tool_result(text, limit, self.counter, reference)
                if truncated is not None:
                    m = m.with_text(truncated)
        return _without_media(m) if media and not isinstance(m.content, str) else m


_NOTHING_COMPACTED = CompactionState()
_MASK_ALL = CompactionState(mask_boundary=1 << 62)
"""A state under which every maskable message is masked (derivation ignores the index otherwise)."""


def _derivation(config: ContextConfig, window: int | None) -> tuple[int, int, int]:
    limit = config.truncated_observation_max_chars
    return limit, config.result_limit(window), config.mask_used_lines_chars


def _reference(m: Message) -> str:
    return str(m.metadata.get(REF_KEY) or "(not offloaded)")


def _without_media(m: Message) -> Message:
    assert not isinstance(m.content, str) and m.content is not None
    parts = [p if isinstance(p, TextPart) else TextPart(_media_note(p)) for p in m.content]
    return replace(m, content=tuple(parts))


def _media_note(part: object) -> str:
    kind = "image" if isinstance(part, ImagePart) else "file"
    extra = getattr(part, "extra", {})
    reference = str(extra.get(REF_KEY) or getattr(part, "url", ""))
    return f"[{kind} removed from view] {detail_reference(reference)}"
