"""What the digest reads of each message, worked out once per content, and counts over ranges of messages.

Every pass rebuilds the digest from nearly the same messages: splitting their texts into
candidate lines, finding the names in each and pairing a line with the one above it are the
same each time, so they are kept per message content (`Message.key`); a pass then only
weighs and scores. The counts over the transcript a pass weighs by (in how many messages a
name recurs, how often an output line does) are updated from the previous pass's by the
messages that differ, instead of re-added from thousands of names.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Generic, TypeVar

from contextkeep._compaction._words import command_text, names_in, said
from contextkeep._messages import Message

__all__ = ["Candidates", "Said", "Tally", "Window", "candidates", "said_of", "window_of"]

_LINE_CHARS = 240
"""Longest line kept whole; a longer one (JSON) is cut in pieces after its commas."""
_COMMAND_CHARS = 160
_PIECE_CHARS = 120
_CLAUSE = re.compile(r"(?<=[,;] )")
_SENTENCE = re.compile(r"(?<=[,;.!?] )")
"""Where a long line is cut: a JSON one after its commas, the agent's prose after its sentences too."""
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
_MIN_CHARS = 8
_ALONE_CHARS = 24
"""A line with fewer characters than this besides its longest name comes with the line above it."""
_SAID_MESSAGES = 1 << 12
_CANDIDATE_MESSAGES = 1 << 10
"""Messages remembered: a long transcript's names (small), the window's candidate lines (its text)."""
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Said:
    """The names a message says and the commands it runs."""

    names: frozenset[str]
    """The names in its text and its calls (`said`)."""
    text_names: frozenset[str]
    """The names in its text alone (what an output holds)."""
    commands: tuple[tuple[str, str, str], ...]
    """Each call's id, tool and command's first line (`_first_line`)."""


@dataclass(frozen=True, slots=True)
class Candidates:
    """A message's candidate lines for the digest (an output's; the agent's notes and code), and its units.

    A unit is a line, or a line that says little alone with the one above it; each text once
    (the first), only those with a name. The units' fields are parallel tuples: a pass reads
    them with `map` and `zip`, thousands of units without a Python step for each.
    """

    lines: tuple[str, ...]
    """Every non-empty candidate line, in order."""
    at: tuple[tuple[int, ...], ...]
    """Each unit's positions in `lines`."""
    texts: tuple[tuple[str, ...], ...]
    """Each unit's lines."""
    unit_names: tuple[frozenset[str], ...]
    """The names in each unit."""
    chars: tuple[int, ...]
    """Each unit's characters."""
    names: frozenset[str]
    """The names in all its units, but plain words (letters, no inner capital)."""
    plain_names: frozenset[str]
    """The plain words in all its units."""
    output_lines: tuple[str, ...]
    """A tool output's stripped lines, empty ones too (how often outputs repeat a line)."""


class _Memo(Generic[_T]):
    """Values worked out per message content (`Message.key`); past `size`, the oldest is forgotten."""

    def __init__(self, make: Callable[[Message], _T], size: int) -> None:
        self._make, self._size = make, size
        self._values: dict[str, _T] = {}
        self._lock = threading.Lock()  # a miss inserts and evicts; a hit only reads

    def __call__(self, m: Message) -> _T:
        value = self._values.get(m.key)
        if value is None:
            value = self._make(m)
            with self._lock:
                self._values[m.key] = value
                if len(self._values) > self._size:
                    del self._values[next(iter(self._values))]
        return value


def _said(m: Message) -> Said:
    names = names_in(said(m))
    text_names = names if not m.tool_calls else names_in(m.text)
    commands = tuple((c.id, c.name, _first_line(command_text(c))) for c in m.tool_calls)
    return Said(names, text_names, commands)


def _candidates(m: Message) -> Candidates:
    output = _stripped(m.text) if m.role == "tool" else ()
    texts = [output] if m.role == "tool" else []
    if m.role == "assistant":  # what the agent noted: its findings, in its own words
        texts.append(_stripped(m.text, _SENTENCE))
    for c in m.tool_calls:
        command = command_text(c).strip().split("\n")
        texts.append(_stripped("\n".join(command[_body(command)])))
    flat: list[str] = []
    units: dict[tuple[str, ...], tuple[tuple[int, ...], frozenset[str]]] = {}
    for text in texts:
        first = len(flat)
        flat.extend(line for line in text if line)
        for at in _units(flat, first):
            lines = tuple(flat[i] for i in at)
            names = frozenset().union(*map(names_in, lines))
            if names and lines not in units:  # the first of a text is the one that counts
                units[lines] = (at, names)
    found = frozenset().union(*(names for _, names in units.values()))
    plain = frozenset(n for n in found if _plain(n))
    return Candidates(
        lines=tuple(flat),
        at=tuple(at for at, _ in units.values()),
        texts=tuple(units),
        unit_names=tuple(names for _, names in units.values()),
        chars=tuple(sum(map(len, lines)) for lines in units),
        names=found - plain,
        plain_names=plain,
        output_lines=output,
    )


said_of = _Memo(_said, _SAID_MESSAGES)
"""What a message says, remembered by its content."""
candidates = _Memo(_candidates, _CANDIDATE_MESSAGES)
"""A message's candidate lines and units, remembered by its content."""


class Window:
    """The candidates of a window of messages, each unit's text once (the first), in order.

    Each thread keeps its last one and extends it when the next window starts with the same
    messages (the next pass drops more), so a unit is looked at once, not once per pass. Its
    lists change at this thread's next `window_of`.
    """

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.lines: list[str] = []
        """Every candidate line of the window's messages, in order."""
        self.offsets: list[int] = []
        """Where each message's lines begin in `lines`."""
        self.names: set[str] = set()
        """The names in the units, but plain words."""
        self.plain: set[str] = set()
        """The plain words in the units."""
        self.seen: set[tuple[str, ...]] = set()
        self.message: list[int] = []
        """The units' fields: the message (its place in the window), `Candidates.at` and so on."""
        self.at: list[tuple[int, ...]] = []
        self.texts: list[tuple[str, ...]] = []
        self.unit_names: list[frozenset[str]] = []
        self.chars: list[int] = []

    def extend(self, messages: Sequence[Message]) -> None:
        """Add the units of `messages` (after those already here) that hold a text not seen yet."""
        for m in messages:
            c = candidates(m)
            k = len(self.offsets)
            self.offsets.append(len(self.lines))
            self.lines.extend(c.lines)
            self.names |= c.names
            self.plain |= c.plain_names
            for i, text in enumerate(c.texts):
                if text not in self.seen:
                    self.seen.add(text)
                    self.message.append(k)
                    self.at.append(c.at[i])
                    self.texts.append(text)
                    self.unit_names.append(c.unit_names[i])
                    self.chars.append(c.chars[i])
        self.keys.extend(map(_key, messages))


_WINDOW = threading.local()


def window_of(messages: Sequence[Message]) -> Window:
    """The candidates of `messages` (this thread's last window, extended when it is their beginning)."""
    window: Window | None = getattr(_WINDOW, "last", None)
    keys = list(map(_key, messages))
    if window is None or keys[: len(window.keys)] != window.keys:
        window = _WINDOW.last = Window()
    window.extend(messages[len(window.keys) :])
    return window


def _units(flat: Sequence[str], first: int) -> Iterator[tuple[int, ...]]:
    """Units over the text that begins at `first` in `flat`, as positions into `flat`.

    A line that is hardly more than a name (`f.write(content)`, a path in a listing) comes with
    the line above it from the same text, so it reads where it stood.
    """
    for here in range(first, len(flat)):
        line = flat[here]
        if not _MIN_CHARS <= len(line) <= _LINE_CHARS:
            continue
        longest = max(map(len, names_in(line)), default=0)
        alone = len(line) - longest >= _ALONE_CHARS or here == first
        yield (here,) if alone or len(flat[here - 1]) > _LINE_CHARS else (here - 1, here)


def _stripped(text: str, cut: re.Pattern[str] = _CLAUSE) -> tuple[str, ...]:
    """The lines of `text`, stripped; one too long to keep whole (JSON, prose) in pieces cut at `cut`."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if len(line) <= _LINE_CHARS:
            out.append(line)
            continue
        piece = ""
        for part in cut.split(line):
            if piece and len(piece) + len(part) > _PIECE_CHARS:
                out.append(piece.strip())
                piece = ""
            piece += part
        out.append(piece.strip())
    return tuple(out)


def _plain(name: str) -> bool:
    """A name that is a plain word: letters only, no capital but the first."""
    return name.isalpha() and name[1:].islower()


def _first_line(text: str) -> str:
    """A command's first line; after a heredoc, what ran once its body (left out) was written."""
    lines = text.strip().split("\n")
    line, code = lines[0].strip(), _body(lines)
    after = " ".join(x.strip() for x in lines[code.stop + 1 :] if x.strip())
    if after and code.stop < len(lines):
        line = f"{line} … {lines[code.stop].strip()} {after}"
    return line if len(line) <= _COMMAND_CHARS else line[: _COMMAND_CHARS - 1] + "…"


def _body(lines: Sequence[str]) -> slice:
    """Where a command's code is: a heredoc's body (not its terminator and what follows), else line 2 on."""
    opened = _HEREDOC.search(lines[0])
    if opened:
        for i in range(1, len(lines)):
            if lines[i].strip() == opened.group(1):
                return slice(1, i)
    return slice(1, len(lines))


_key = attrgetter("key")


class _Sum(threading.local):
    """One thread's last range: its messages' keys, each one's part, and the sum of the parts."""

    def __init__(self) -> None:
        self.keys: Counter[str] = Counter()
        self.parts: dict[str, tuple[str, ...]] = {}
        self.total: Counter[str] = Counter()


class Tally:
    """How often each string occurs over a range of messages, one part (strings) per message.

    Kept per thread from its last range and updated by the messages that differ: consecutive
    passes read nearly the same messages. A range mostly unlike the last (another
    conversation) is summed afresh.
    """

    def __init__(self, part: Callable[[Message], Iterable[str]]) -> None:
        self._part = part
        self._sum = _Sum()

    def over(self, messages: Sequence[Message]) -> Mapping[str, int]:
        """The counts over `messages`, only positive ones (valid until this thread's next call)."""
        s = self._sum
        keys = Counter(map(_key, messages))
        gone, come = s.keys - keys, keys - s.keys
        if gone.total() + come.total() > len(messages):
            s.parts.clear()
            s.total.clear()
            gone, come = Counter(), keys
        for key, n in gone.items():
            part = s.parts[key] if key in keys else s.parts.pop(key)
            for _ in range(n):
                s.total.subtract(part)
            for name in part:
                if s.total.get(name, 0) <= 0:
                    s.total.pop(name, None)
        missing = come.keys() - s.parts.keys()
        fresh = {m.key: m for m in messages if m.key in missing} if missing else {}
        for key, n in come.items():
            if key not in s.parts:
                s.parts[key] = tuple(self._part(fresh[key]))
            for _ in range(n):
                s.total.update(s.parts[key])
        s.keys = keys
        return s.total
