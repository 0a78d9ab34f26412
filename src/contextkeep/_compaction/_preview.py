"""Layer 1 previews that keep what the agent used: the lines of a masked output naming it.

The names come from the agent's own messages around the output: the call that produced it
and the next `span` messages. Those exist whenever the output is masked (the mask boundary
stays `max_observation_age_rounds` rounds back), so every later build derives the same
preview: it is frozen at mask time and the cached prefix holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from operator import not_

from contextkeep._compaction._digest_parts import said_of
from contextkeep._compaction._words import names_in
from contextkeep._compaction.render import head_tail, masked_output
from contextkeep._config import ContextConfig
from contextkeep._messages import Message

__all__ = ["UsedLines", "used_context", "used_lines"]

_MIN_LINE, _MAX_LINE = 8, 240


def used_context(transcript: Sequence[Message], index: int, span: int) -> Sequence[Message] | None:
    """The messages whose names a preview of `transcript[index]` keeps: the call before it, it, `span` after.

    `None` until the `span` messages after it exist. The preview is a function of these alone.
    """
    if index + 1 + span > len(transcript):
        return None
    low = index
    while low > 0 and transcript[low - 1].role == "tool":  # results of the same call message
        low -= 1
    return transcript[max(low - 1, 0) : index + 1 + span]


def _used_names(context: Sequence[Message]) -> frozenset[str]:
    return frozenset().union(*(said_of(m).names for m in context if m.role == "assistant"))


def used_lines(output: Message, context: Sequence[Message], budget: int, shown: str) -> tuple[str, ...]:
    """Whole lines of `output` naming what the agent used, in at most `budget` characters.

    Greedy by new names per character; lines `shown` (the head and tail) already holds are skipped.
    The names are those of `context` (`used_context`: the preview must not change later).
    """
    if budget <= 0:
        return ()
    names = _used_names(context)
    candidates: dict[str, frozenset[str]] = {}
    lines = [line for line in map(str.strip, output.text.splitlines()) if _MIN_LINE <= len(line) <= _MAX_LINE]
    per_line = list(map(names_in, lines))  # remembered per line
    # Most lines name nothing the agent used: only the others are looked for in `shown`.
    used = map(not_, map(names.isdisjoint, per_line))
    for line, named in compress(zip(lines, per_line, strict=True), used):
        if line not in candidates and line not in shown:
            candidates[line] = named & names
    order = {line: n for n, line in enumerate(candidates)}
    covered: set[str] = set()
    chosen: list[str] = []
    while candidates and budget > 0:
        line, found = max(
            candidates.items(), key=lambda kv: (len(kv[1] - covered) / len(kv[0]), -order[kv[0]])
        )
        del candidates[line]
        if not found - covered:
            break
        if len(line) + 1 > budget:
            if budget <= _MIN_LINE:
                break
            continue
        chosen.append(line)
        covered |= found
        budget -= len(line) + 1
    return tuple(sorted(chosen, key=order.__getitem__))


class UsedLines:
    """The used lines of each masked output, kept per output and the messages around it.

    Every build of a masked view asks again, and counting ahead asks before a pass does.
    """

    def __init__(self, size: int = 16_384) -> None:
        self._kept: dict[tuple[object, ...], tuple[str, ...]] = {}
        self._size = size

    def of(
        self, m: Message, index: int, transcript: Sequence[Message], config: ContextConfig, reference: str
    ) -> tuple[str, ...]:
        """The lines of `m` (masked, at `transcript[index]`) naming what the agent used.

        Only when they leave the preview (with `reference`) shorter than `m`; none until the
        messages after `m` exist (`settled`).
        """
        context = _context(m, index, transcript, config)
        if context is None:
            return ()
        limit, budget = config.truncated_observation_max_chars, config.mask_used_lines_chars
        key = (m.key, reference, limit, budget, *(c.key for c in context))
        used = self._kept.get(key)
        if used is None:
            if len(self._kept) > self._size:
                self._kept.clear()
            used = used_lines(m, context, budget, head_tail(m.text, limit))
            if len(masked_output(m.text, limit, reference, used)) >= len(m.text):
                used = ()
            self._kept[key] = used
        return used

    @staticmethod
    def settled(m: Message, index: int, transcript: Sequence[Message], config: ContextConfig) -> bool:
        """Whether `of` is final for `m`: not while the messages after it are still to come."""
        return (
            not _applies(m, index, transcript, config) or _context(m, index, transcript, config) is not None
        )


def _applies(m: Message, index: int, transcript: Sequence[Message], config: ContextConfig) -> bool:
    """Whether `m` keeps used lines at all: they are on, and `m` is `transcript[index]`."""
    return bool(config.mask_used_lines_chars) and index < len(transcript) and transcript[index].key == m.key


def _context(
    m: Message, index: int, transcript: Sequence[Message], config: ContextConfig
) -> Sequence[Message] | None:
    if not _applies(m, index, transcript, config):
        return None
    return used_context(transcript, index, config.max_observation_age_rounds)
