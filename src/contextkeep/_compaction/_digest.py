"""The working-set digest: what stays of dropped rounds besides the marker, verbatim and model-free.

Two parts, within a token budget. First the agent's own commands from the dropped rounds,
one line each (a heredoc's body left out, what ran after it kept), each with the reference
to its own output, so one `recall` fetches the output a command produced; a command run
again shows once, with its newest output. Then lines of the dropped outputs, of the agent's
notes (what it found, in its own words) and of its code, chosen greedily by value per token:
a line is worth the names in it that no chosen line (or shown command) holds yet, and a name
is worth most when the agent itself wrote it (decayed by how long ago), then by how many
outputs it recurs in, scaled by rarity.
A line that is little more than a name comes with the line above it (it is read where it
stood); a line many outputs repeat is boilerplate; plain words say little; names the agent
says in the kept rounds are in view anyway. A line too long to keep whole (JSON, a paragraph)
is kept in pieces cut after its commas (and a note's after its sentences).
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import add, lt, mul

from contextkeep._compaction._digest_parts import Tally, Window, candidates, said_of, window_of
from contextkeep._compaction._words import command_text, names_in
from contextkeep._compaction.builder import REF_KEY
from contextkeep._compaction.render import detail_reference
from contextkeep._messages import Message
from contextkeep._tokens import TokenCounter

__all__ = [
    "Digest",
    "RoundCommand",
    "build_digest",
    "command_index",
    "command_text",
    "digest_lines",
]

_COMMAND_SHARE = 0.3
_HALF_LIFE = 60.0
"""Agent messages after which a name the agent wrote is worth half as much."""
_AGENT, _RECUR, _SEEN = 3.0, 0.6, 0.15
"""Weight of the agent's own use, of recurrence across outputs; factor of a name the kept rounds say."""
_BASE, _PLAIN = 0.3, 0.2
"""Worth of any name made of parts, a path or a number; factor of a plain word (letters, no inner capital)."""
_HEAD = "Working set of the removed rounds (verbatim). Commands, each with its output:"
_LINES_HEAD = "Lines from their outputs and code:"
_LEFT_OUT = "- ({} earlier command(s) left out)"
_NOTES = re.compile(r"- \(\d+ earlier command\(s\) left out\)")


@dataclass(frozen=True, slots=True)
class RoundCommand:
    """One command of the index: what produced an output, and where the output is."""

    index: int
    """Transcript index of the assistant message that made the call."""
    tool: str
    """The tool called."""
    command: str
    """The command's first line (its one string argument, else the arguments)."""
    reference: str
    """The output's offload reference ('' when the output was too short to offload)."""


@dataclass(frozen=True, slots=True)
class Digest:
    """The digest's text, and whether its budget ran out before what it would have kept."""

    text: str
    full: bool


def command_index(transcript: Sequence[Message], start: int, end: int) -> list[RoundCommand]:
    """Every tool call made in `transcript[start:end]`, with its command and its output's reference."""
    refs = {
        m.tool_call_id: str(m.metadata.get(REF_KEY) or "")
        for m in transcript[start:end]
        if m.role == "tool" and m.tool_call_id
    }
    return [
        RoundCommand(i, tool, command, refs.get(call_id, ""))
        for i in range(start, end)
        for call_id, tool, command in said_of(transcript[i]).commands
    ]


_SPREAD_TALLY = Tally(lambda m: said_of(m).names)
"""In how many messages each name is said."""
_RECUR_TALLY = Tally(lambda m: said_of(m).text_names if m.role == "tool" else ())
"""In how many outputs each name recurs."""
_REPEAT_TALLY = Tally(lambda m: candidates(m).output_lines if m.role == "tool" else ())
"""How often outputs hold each line."""


def _weights(transcript: Sequence[Message], end: int, window: Window) -> tuple[dict[str, float], set[str]]:
    """What each name of the `window`'s units is worth: the agent's own use (recent most), then recurrence.

    Scaled by rarity (names in most messages, plain words, say little); names the kept
    rounds show are in view anyway. Also the names that tell something: the agent's, and
    those that are not plain words. Worked out with `map` over the names, thousands per pass.
    """
    other, plain = window.names, window.plain
    every = other | plain
    agent: dict[str, float] = {}
    replies = [m for m in transcript if m.role == "assistant"]
    for age, m in enumerate(reversed(replies)):
        names = said_of(m).names & every
        agent.update(
            zip(
                names,
                map(add, map(agent.get, names, repeat(0.0)), repeat(0.5 ** (age / _HALF_LIFE))),
                strict=True,
            )
        )
    # Capped once at the end: the same as capping each sum, every decay being positive.
    agent = {n: min(w, 2.0) for n, w in agent.items()}
    spread = _SPREAD_TALLY.over(transcript)
    recur = _RECUR_TALLY.over(transcript[:end])
    # Only what the agent said stays verbatim while the digest does: old outputs get masked.
    shown = frozenset().union(*(said_of(m).names for m in transcript[end:] if m.role == "assistant"))
    weights = dict.fromkeys(every, 0.0)
    total = len(transcript)
    for group, base, factor in ((other, _BASE, 1.0), (plain, 0.0, _PLAIN)):
        found = list((group & agent.keys()) | (group & recur.keys()))  # the others are worth nothing
        times = list(map(recur.get, found, repeat(0)))
        recurs = {n: _RECUR * min(math.log2(n), 3.0) if n > 1 else 0.0 for n in set(times)}
        own = map(mul, repeat(_AGENT), map(agent.get, found, repeat(0.0)))
        w = list(map(add, map(add, own, map(recurs.__getitem__, times)), repeat(base)))
        spreads = list(map(spread.get, found, repeat(0)))
        rarity = {n: math.log2(1 + total / max(n, 1)) for n in set(spreads)}
        seen = map({True: _SEEN, False: 1.0}.__getitem__, map(shown.__contains__, found))
        worth = map(mul, map(mul, map(mul, w, map(rarity.__getitem__, spreads)), seen), repeat(factor))
        weights.update(compress(zip(found, worth, strict=True), map(lt, repeat(0.0), w)))
    telling = {n for n in other if weights[n]} | (plain & agent.keys())
    return weights, telling


_WINDOW_CHARS = 400_000
"""Text of the newest dropped messages whose lines are candidates (the commands are all listed).

A pass rebuilds the digest from what it drops: without a bound, each pass reads the whole
dropped history again (a 20 KB output per call, 120 calls: about 1 s per pass)."""


def _window_start(transcript: Sequence[Message], start: int, end: int) -> int:
    """The first of the newest messages of `transcript[start:end]` holding about `_WINDOW_CHARS`."""
    chars = 0
    for i in range(end - 1, start - 1, -1):
        chars += len(transcript[i].text)
        if chars > _WINDOW_CHARS:
            return i + 1
    return start


def build_digest(
    transcript: Sequence[Message], start: int, end: int, counter: TokenCounter, budget: int
) -> Digest:
    """The digest of the dropped `transcript[start:end]` in at most about `budget` tokens."""
    if budget <= 0 or end <= start:
        return Digest("", False)
    every = command_index(transcript, start, end)
    named = len({c.tool for c in every}) > 1  # one tool for every call: its name tells nothing
    # A command run again shows once, with its newest output (what `recall` by command reads).
    newest = {(c.tool, c.command): k for k, c in enumerate(every)}
    commands = [c for k, c in enumerate(every) if newest[c.tool, c.command] == k]
    lines = [
        f"- {c.tool + ' ' if named else ''}{c.command}"
        + (f" → {detail_reference(c.reference)}" if c.reference else "")
        for c in commands
    ]
    room, used, keep = int(budget * _COMMAND_SHARE), 0, 0
    for line in reversed(lines):  # the newest commands stay
        cost = counter.count_text(line) + 1
        if used + cost > room:
            break
        used, keep = used + cost, keep + 1
    full = keep < len(lines)
    shown = lines[len(lines) - keep :]
    left = budget - used
    covered = names_in("\n".join(shown))  # the commands shown hold these already
    picked, exhausted = _pick_lines(transcript, start, end, counter, left, covered)
    parts = [_HEAD]
    if full:
        parts.append(_LEFT_OUT.format(len(lines) - keep))
    parts.extend(shown)
    if picked:
        parts.append(_LINES_HEAD)
        parts.extend(picked)
    return Digest("\n".join(parts), full or exhausted)


def digest_lines(text: str) -> list[str]:
    """The digest's own lines, without its headings (what a summary replacing it must keep)."""
    return [
        line
        for line in text.splitlines()
        if line.strip() and line not in (_HEAD, _LINES_HEAD) and not _NOTES.fullmatch(line)
    ]


_SAMPLE_LINES = 64
"""Lines counted to learn this text's tokens per character before the others are estimated."""


def _tokens_per_char(flat: Sequence[str], counter: TokenCounter) -> float:
    """Tokens per character of an even sample of `flat` (digits and code run far from chars / 4).

    An estimate biased low would have the greedy pick count nearly every line: each one it
    takes up, once counted, falls behind the next still estimated.
    """
    sample = flat[:: max(len(flat) // _SAMPLE_LINES, 1)]
    chars = sum(map(len, sample))
    return sum(counter.count_text(line) for line in sample) / chars if chars else 0.25


_Entry = tuple[float, int, tuple[int, ...], frozenset[str], float, float, float, int]
"""A queued unit: -value per token, its message in the window and its lines there, its names, its
scale, its estimated (or counted) tokens, and its value with the version of `covered` it is for."""


def _pick_lines(
    transcript: Sequence[Message],
    start: int,
    end: int,
    counter: TokenCounter,
    budget: int,
    covered: Iterable[str],
) -> tuple[list[str], bool]:
    """Greedy by value per token, lazily re-valued (a unit's value falls as its names get covered)."""
    start = _window_start(transcript, start, end)
    window = window_of(transcript[start:end])
    weights, telling = _weights(transcript, end, window)
    greedy = _Greedy(window, weights, counter, budget, set(covered))
    per_char = _tokens_per_char(window.lines, counter)
    greedy.run(_queue(window, weights, telling, per_char, greedy.covered, transcript[start:]))
    return _render(window.lines, sorted(greedy.chosen)), greedy.exhausted


class _Greedy:
    """One greedy choice: the names covered (and their version), the budget left, the lines chosen."""

    def __init__(
        self, window: Window, weights: dict[str, float], counter: TokenCounter, budget: int, covered: set[str]
    ) -> None:
        self.flat, self.offsets, self.weights, self.counter = window.lines, window.offsets, weights, counter
        self.budget, self.covered = budget, covered
        self.version = 1
        """Grows with `covered`: a value computed since needs no new sum."""
        self.costs: dict[int, int] = {}
        self.chosen: set[int] = set()
        self.exhausted = False
        """Whether the budget ran out before a line the agent's own names made worth keeping."""

    def worth(self, found: Iterable[str]) -> float:
        return math.fsum(map(self.weights.__getitem__, found))  # exact, so the same in any set order

    def value_of(self, entry: _Entry) -> float:
        return entry[6] if entry[7] == self.version else entry[4] * self.worth(entry[3] - self.covered)

    def cost(self, k: int, at: tuple[int, ...]) -> int:
        costs, lines = self.costs, [self.offsets[k] + i for i in at]
        for i in lines:
            if i not in costs:
                costs[i] = self.counter.count_text(self.flat[i]) + 1
        return sum(costs[i] for i in lines if i not in self.chosen)

    def run(self, heap: list[_Entry]) -> None:
        """Take units off `heap` while the budget lasts."""
        weight, covered = self.weights.__getitem__, self.covered  # `covered` grows in place
        again: _Entry | None = None
        while self.budget > 0 and (heap or again):
            # A unit re-queued goes back as the next comes off: one sift of the heap, not two.
            entry = heapq.heappop(heap) if again is None else heapq.heappushpop(heap, again)
            _, k, at, found, scale, guess, value, valid = entry
            again = None
            # Plainly too long: not counted. Left in the heap until it comes up, as taking out
            # all that no longer fit each time the budget halves costs more than passing them over.
            if guess > 2 * self.budget:
                continue
            if valid != self.version:
                value = scale * math.fsum(map(weight, found - covered))
            if value <= 0:  # covered
                continue
            if heap and value / guess < -heap[0][0]:  # worth less now (its names got covered): re-queue
                again = (-value / guess, k, at, found, scale, guess, value, self.version)
                continue
            spend = self.cost(k, at)  # counted only when it is about to be taken
            if spend and heap and value / spend < -heap[0][0]:  # dearer than estimated: re-queue at its count
                again = (-value / spend, k, at, found, scale, spend, value, self.version)
            elif spend:
                self._take(k, at, found, spend, value)
        self.exhausted = self.exhausted or any(self.value_of(h) >= _AGENT for h in heap)

    def _take(self, k: int, at: tuple[int, ...], found: frozenset[str], spend: int, value: float) -> None:
        if spend > self.budget:
            self.exhausted = self.exhausted or value >= _AGENT * 0.5
            return
        self.chosen.update(self.offsets[k] + i for i in at)
        before = len(self.covered)
        self.covered |= found
        self.version += len(self.covered) > before
        self.budget -= spend


def _queue(
    window: Window,
    weights: dict[str, float],
    telling: set[str],
    per_char: float,
    covered: set[str],
    outputs: Sequence[Message],
) -> list[_Entry]:
    """Every unit of the window worth a line, once per text, queued by an estimate of its tokens.

    Counted only when one comes up: there are thousands of units per pass, so each is queued
    with a few lookups and one sum, and the heap is made at once.
    """
    repeated, weight = _REPEAT_TALLY.over(outputs), weights.__getitem__
    heap: list[_Entry] = []
    fields = zip(window.message, window.at, window.texts, window.unit_names, window.chars, strict=True)
    for k, at, text, names, chars in fields:
        # Plain words alone (prose, a banner) the agent never wrote tell nothing worth a line.
        if telling.isdisjoint(names):
            continue
        # A line many outputs repeat verbatim is the tool's boilerplate, not what it found.
        scale = 1 / max(repeated.get(text[-1], 0) - 1, 1)
        value = scale * math.fsum(map(weight, names))  # a name worth nothing adds nothing to a sum
        guess = chars * per_char + len(at)
        # A unit holding none of the covered names has its value for the first version of `covered`.
        heap.append((-value / guess, k, at, names, scale, guess, value, int(covered.isdisjoint(names))))
    heapq.heapify(heap)  # no two entries compare equal: the same pops as pushing each in turn
    return heap


def _render(flat: Sequence[str], chosen: Sequence[int]) -> list[str]:
    """The chosen lines in order; a repeated one only where it is the context of the next."""
    out: list[str] = []
    done: set[str] = set()
    for k, i in enumerate(chosen):
        context = k + 1 < len(chosen) and chosen[k + 1] == i + 1
        if flat[i] not in done or context:
            out.append(flat[i])
            done.add(flat[i])
    return out
