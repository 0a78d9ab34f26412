"""A session's views converted incrementally: each conversion costs what changed since the last.

Consecutive views of one conversation mostly share their messages (the same `Message`
objects): a call appends a few, a compaction pass replaces or removes some. The last
view and its converted form are kept; a view whose lineage says it extends the last one
(`contextkeep._lineage`) converts only what it appended; any other is compared with the last
(a C-level walk that stops at the first different message), the converted form is cut back to
the common prefix and only the rest is converted. Converted messages the cut removed are
reused when the same objects reappear further on (a pass that drops old rounds shifts the
view). Only the last view is kept, so nothing accumulates for messages that left it.

The converted dicts are shared between the lists handed out (that is what makes a call cheap):
callers must copy a dict before changing it. The lists themselves are new each time.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import ne
from typing import Any

from contextkeep._continuation import common_prefix
from contextkeep._formats.anthropic import AnthropicAssembly, message_blocks
from contextkeep._formats.openai import view_message
from contextkeep._lineage import Lineage, extended_by, lineage_of
from contextkeep._messages import Message

__all__ = ["SplicedAnthropic", "SplicedOpenAI", "ViewConversions"]

_MISSING = object()


class _Spliced:
    """The last view converted, one item per message, updated by cutting back and extending."""

    def __init__(self) -> None:
        self._view: list[Message] = []
        self._items: list[Any] = []
        self._lineage: Lineage | None = None  # the last view's (`contextkeep._lineage`)
        self._lineage_length = 0
        self.converted = 0
        """How many messages the last conversion converted (the others were reused)."""

    def __len__(self) -> int:
        """How many converted messages are kept: those of the last view converted."""
        return len(self._items)

    def _splice(self, view: Sequence[Message]) -> None:
        """Bring `_view` and `_items` to `view`."""
        vouched = extended_by(view, self._lineage) and len(self._view) == self._lineage_length
        kept = len(self._view) if vouched else common_prefix(self._view, view, ne)
        lineage = lineage_of(view)
        self._lineage, self._lineage_length = lineage, lineage.length if lineage else 0
        cut = self._view[kept:]  # holds the old objects while their ids are looked up
        reuse = dict(zip(map(id, cut), self._items[kept:], strict=True)) if cut else {}
        self._cut(kept)
        del self._view[kept:], self._items[kept:]
        self.converted = 0
        for m in view[kept:]:
            item = reuse.get(id(m), _MISSING)
            if item is _MISSING:
                item = self._convert(m)
                self.converted += 1
            self._items.append(item)
            self._add(m, item)
        self._view.extend(view[kept:])

    def _convert(self, m: Message) -> Any:
        raise NotImplementedError

    def _cut(self, at: int) -> None:
        """Hook: the view is being cut back to its first `at` messages."""

    def _add(self, m: Message, item: Any) -> None:
        """Hook: `m`, converted to `item`, now follows."""


class SplicedOpenAI(_Spliced):
    """OpenAI chat messages of a session's views."""

    def convert(self, view: Sequence[Message]) -> list[dict[str, Any]]:
        """`to_openai(view)`, reusing the dicts of messages the last view shared with it."""
        self._splice(view)
        return list(self._items)

    def _convert(self, m: Message) -> dict[str, Any]:
        return view_message(m)


class SplicedAnthropic(_Spliced):
    """Anthropic `(system, messages)` of a session's views."""

    def __init__(self) -> None:
        super().__init__()
        self._assembly = AnthropicAssembly()

    def convert(self, view: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
        """`to_anthropic(view)`, reusing the blocks of messages the last view shared with it."""
        self._splice(view)
        return self._assembly.result()

    def _convert(self, m: Message) -> list[dict[str, Any]] | None:
        return None if m.role == "system" else message_blocks(m)

    def _cut(self, at: int) -> None:
        self._assembly.cut(at)

    def _add(self, m: Message, item: Any) -> None:
        self._assembly.add(m, item)


class ViewConversions:
    """One session's view conversions, shared by the views it prepares."""

    def __init__(self) -> None:
        self.openai = SplicedOpenAI()
        """OpenAI chat messages."""
        self.anthropic = SplicedAnthropic()
        """Anthropic Messages."""
