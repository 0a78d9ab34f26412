"""Deriving the view: what the model sees, from (transcript, compaction state, config).

The view is, in order: the system preamble (through the `on_system_prompt`
hooks), the pinned first user message, the summary, the dropped-rounds marker,
and every round from the cut on, with old tool outputs masked (L1) and over-long
ones truncated (L0). Derived messages are cached per transcript index while the
state's boundaries stay put, so building the view for call N costs work
proportional to what was appended since call N-1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from contextkeep.compaction.ingest import truncate_tool_result
from contextkeep.compaction.render import (
    detail_reference,
    dropped_marker,
    masked_output,
    progress_section,
)
from contextkeep.compaction.state import CompactionState, ProgressStep
from contextkeep.config import ContextConfig
from contextkeep.messages import ImagePart, Message, TextPart
from contextkeep.rounds import Round
from contextkeep.tokens import TokenCounter

__all__ = [
    "REF_KEY",
    "SystemPromptHook",
    "ViewBuilder",
    "default_progress_hook",
    "first_droppable",
]

REF_KEY = "ck_ref"
"""Metadata key of a message's (or part's) offload reference, set when it is added."""

SystemPromptHook = Callable[[str, Sequence[ProgressStep]], str]


def default_progress_hook(system: str, steps: Sequence[ProgressStep]) -> str:
    """DB-GPT's task progress: completed steps and their snapshot references."""
    return system + progress_section(steps) if steps else system


def first_droppable(rounds: Sequence[Round], pin_first_user: bool) -> int:
    """Transcript index of the first message compaction may remove."""
    start = 0
    for r in rounds:
        if r.kind == "system" and r.index == 0:
            start = r.end
            continue
        if pin_first_user and r.kind == "user":
            return r.end
        return start
    return start


@dataclass(frozen=True, slots=True)
class _BodyKey:
    cut: int
    mask_boundary: int
    image_boundary: int


class ViewBuilder:
    """Builds views for one conversation, caching derived messages between calls."""

    def __init__(
        self,
        config: ContextConfig,
        counter: TokenCounter,
        hooks: Sequence[SystemPromptHook] = (default_progress_hook,),
    ) -> None:
        self.config = config
        self.counter = counter
        self.hooks = tuple(hooks)
        self._key: _BodyKey | None = None
        self._body: list[Message] = []
        self._derived: dict[tuple[str, object, bool, bool], Message] = {}

    def build(
        self, transcript: Sequence[Message], rounds: Sequence[Round], state: CompactionState
    ) -> list[Message]:
        """The view for `state` (a pure function of the inputs; cached)."""
        return [*self.head(transcript, rounds, state), *self.body(transcript, rounds, state)]

    def head(
        self, transcript: Sequence[Message], rounds: Sequence[Round], state: CompactionState
    ) -> list[Message]:
        """Preamble, pinned task, summary and dropped-rounds marker."""
        out: list[Message] = []
        preamble_end = rounds[0].end if rounds and rounds[0].kind == "system" and rounds[0].index == 0 else 0
        for i in range(preamble_end):
            m = transcript[i]
            if i == 0:
                text = m.text
                for hook in self.hooks:
                    text = hook(text, state.progress[: state.progress_shown])
                m = m if text == m.text else m.with_text(text)
            out.append(m)
        if state.minimal:
            return out
        start = first_droppable(rounds, self.config.pin_first_user)
        cut = max(state.cut, start)
        if cut > start and self.config.pin_first_user and start > preamble_end:
            out.extend(self._derive(transcript[i], i, state) for i in range(preamble_end, start))
        if state.summary is not None:
            text = self.config.summary_template.format(summary=state.summary.text)
            if state.summary.reference:
                text += "\n" + detail_reference(state.summary.reference)
            out.append(Message(self.config.summary_role, text, metadata={"ck_kind": "summary"}))
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
            out.append(Message("user", text, metadata={"ck_kind": "dropped"}))
        return out

    def body(
        self, transcript: Sequence[Message], rounds: Sequence[Round], state: CompactionState
    ) -> list[Message]:
        """Rounds from the cut on, masked and truncated as the state says."""
        start = max(state.cut, first_droppable(rounds, self.config.pin_first_user))
        if state.cut == 0:
            start = rounds[0].end if rounds and rounds[0].kind == "system" and rounds[0].index == 0 else 0
        key = _BodyKey(start, state.mask_boundary, state.image_boundary)
        if key != self._key:
            self._key, self._body = key, []
        for i in range(start + len(self._body), len(transcript)):
            self._body.append(self._derive(transcript[i], i, state))
        return self._body[: len(transcript) - start]

    def _derive(self, m: Message, index: int, state: CompactionState) -> Message:
        """A transcript message as the view shows it (cached: a compaction pass re-derives many)."""
        masked = index < state.mask_boundary
        media = bool(m.media) and index < max(state.mask_boundary, state.image_boundary)
        key = (m.key, m.metadata.get(REF_KEY), masked, media)
        cached = self._derived.get(key)
        if cached is None:
            if len(self._derived) > 16_384:
                self._derived.clear()
            cached = self._derived[key] = self._transform(m, masked, media)
        return cached if cached.id == m.id else replace(cached, id=m.id)

    def _transform(self, m: Message, masked: bool, media: bool) -> Message:
        if m.role == "tool":
            reference = m.metadata.get(REF_KEY)
            text = m.text
            if masked and len(text) > self.config.truncated_observation_max_chars:
                ref = reference or "(not offloaded)"
                return m.with_text(masked_output(text, self.config.truncated_observation_max_chars, ref))
            truncated = truncate_tool_result(text, self.config.tool_result_limit, self.counter, reference)
            if truncated is not None:
                return m.with_text(truncated)
        return _without_media(m) if media else m


def _without_media(m: Message) -> Message:
    assert not isinstance(m.content, str) and m.content is not None
    parts = [p if isinstance(p, TextPart) else TextPart(_media_note(p)) for p in m.content]
    return replace(m, content=tuple(parts))


def _media_note(part: object) -> str:
    kind = "image" if isinstance(part, ImagePart) else "file"
    extra = getattr(part, "extra", {})
    reference = str(extra.get(REF_KEY) or getattr(part, "url", ""))
    return f"[{kind} removed from view] {detail_reference(reference)}"
