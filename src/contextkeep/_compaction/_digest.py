"""The working-set digest: what stays of dropped rounds besides the marker, verbatim and model-free.

Two parts, within a token budget. First the agent's own commands from the dropped rounds,
one line each (a heredoc's body left out, what ran after it kept), each with the reference
to its own output, so one `recall` fetches the output a command produced; a command run
again shows once, with its newest output. Then lines of the dropped outputs and of the
agent's code, chosen greedily by value per token: a line is worth the names in it that no
chosen line (or shown command) holds yet, and a name is worth most when the agent itself
wrote it (decayed by how long ago), then by how many outputs it recurs in, scaled by rarity.
A line that is little more than a name comes with the line above it (it is read where it
stood); a line many outputs repeat is boilerplate; plain words say little; names the agent
says in the kept rounds are in view anyway. A line too long to keep whole (JSON) is kept in
pieces cut after its commas.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from contextkeep._compaction._words import command_text, names_in, said
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

_COMMAND_CHARS = 160
_LINE_CHARS = 240
_PIECE_CHARS = 120
_CLAUSE = re.compile(r"(?<=[,;] )")
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
_MIN_CHARS = 8
_ALONE_CHARS = 24
"""A line with fewer characters than this besides its longest name comes with the line above it."""
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
        RoundCommand(i, c.name, _first_line(command_text(c)), refs.get(c.id, ""))
        for i in range(start, end)
        for c in transcript[i].tool_calls
    ]


def _first_line(text: str) -> str:
    """A command's first line; after a heredoc, what ran once its body (left out) was written."""
    lines = text.strip().split("\n")
    line, body = lines[0].strip(), _body(lines)
    after = " ".join(x.strip() for x in lines[body.stop + 1 :] if x.strip())
    if after and body.stop < len(lines):
        line = f"{line} … {lines[body.stop].strip()} {after}"
    return line if len(line) <= _COMMAND_CHARS else line[: _COMMAND_CHARS - 1] + "…"


def _body(lines: Sequence[str]) -> slice:
    """Where a command's code is: a heredoc's body (not its terminator and what follows), else line 2 on."""
    opened = _HEREDOC.search(lines[0])
    if opened:
        for i in range(1, len(lines)):
            if lines[i].strip() == opened.group(1):
                return slice(1, i)
    return slice(1, len(lines))


def _plain(name: str) -> bool:
    return name.isalpha() and name[1:].islower()


def _weights(transcript: Sequence[Message], end: int, needed: set[str]) -> tuple[dict[str, float], set[str]]:
    """What each of the `needed` names is worth: the agent's own use (recent most), then recurrence.

    Scaled by rarity (names in most messages, plain words, say little); names the kept
    rounds show are in view anyway. Also the names that tell something: the agent's, and
    those that are not plain words.
    """
    agent: dict[str, float] = {}
    replies = [m for m in transcript if m.role == "assistant"]
    for age, m in enumerate(reversed(replies)):
        decay = 0.5 ** (age / _HALF_LIFE)
        for n in names_in(said(m)):
            agent[n] = min(agent.get(n, 0.0) + decay, 2.0)
    spread = Counter(n for m in transcript for n in names_in(said(m)))
    recur = Counter(n for m in transcript[:end] if m.role == "tool" for n in names_in(m.text))
    # Only what the agent said stays verbatim while the digest does: old outputs get masked.
    shown = {n for m in transcript[end:] if m.role == "assistant" for n in names_in(said(m))}
    weights = {}
    for n in needed.intersection(agent.keys() | recur.keys()):
        w = _AGENT * agent.get(n, 0.0) + (_RECUR * min(math.log2(recur[n]), 3.0) if recur[n] > 1 else 0.0)
        w += 0.0 if _plain(n) else _BASE
        rarity = math.log2(1 + len(transcript) / max(spread[n], 1))
        if w > 0:
            weights[n] = w * rarity * (_SEEN if n in shown else 1.0) * (_PLAIN if _plain(n) else 1.0)
    return weights, {n for n in weights if n in agent or not _plain(n)}


def _candidate_lines(transcript: Sequence[Message], start: int, end: int) -> Iterator[tuple[str, ...]]:
    """The lines of each dropped output and of each body of the agent's commands, stripped, in order."""
    for m in transcript[start:end]:
        if m.role == "tool":
            yield _stripped(m.text)
        for c in m.tool_calls:
            lines = command_text(c).strip().split("\n")
            yield _stripped("\n".join(lines[_body(lines)]))


@functools.lru_cache(maxsize=1 << 10)  # every pass reads the same outputs again
def _stripped(text: str) -> tuple[str, ...]:
    """The lines of `text`, stripped; one too long to keep whole (JSON) in pieces cut after commas."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if len(line) <= _LINE_CHARS:
            out.append(line)
            continue
        piece = ""
        for part in _CLAUSE.split(line):
            if piece and len(piece) + len(part) > _PIECE_CHARS:
                out.append(piece.strip())
                piece = ""
            piece += part
        out.append(piece.strip())
    return tuple(out)


def _units(flat: Sequence[str], starts: set[int]) -> Iterator[tuple[int, ...]]:
    """Candidate units as positions into `flat`: a line, or a line that says little alone with the one above.

    A line that is hardly more than a name (`f.write(content)`, a path in a listing) comes with
    the line above it from the same text (`starts`: where each text begins), so it reads where
    it stood.
    """
    for here, line in enumerate(flat):
        if not _MIN_CHARS <= len(line) <= _LINE_CHARS:
            continue
        longest = max(map(len, names_in(line)), default=0)
        alone = len(line) - longest >= _ALONE_CHARS or here in starts
        yield (here,) if alone or len(flat[here - 1]) > _LINE_CHARS else (here - 1, here)


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


def _flat(transcript: Sequence[Message], start: int, end: int) -> tuple[list[str], set[int]]:
    """Every non-empty candidate line, in order, and the positions where a new text begins."""
    flat: list[str] = []
    starts: set[int] = set()
    for lines in _candidate_lines(transcript, start, end):
        starts.add(len(flat))
        flat.extend(line for line in lines if line)
    return flat, starts


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


def _estimate(flat: Sequence[str], unit: tuple[int, ...], per_char: float) -> float:
    return sum(len(flat[i]) for i in unit) * per_char + len(unit)


def _pick_lines(
    transcript: Sequence[Message],
    start: int,
    end: int,
    counter: TokenCounter,
    budget: int,
    covered: Iterable[str],
) -> tuple[list[str], bool]:
    """Greedy by value per token, lazily re-valued (a unit's value falls as its names get covered)."""
    covered = set(covered)
    start = _window_start(transcript, start, end)
    flat, starts = _flat(transcript, start, end)
    weights, telling = _weights(transcript, end, set().union(*map(names_in, flat)))
    weighed = weights.keys()
    names = [frozenset(names_in(line) & weighed) for line in flat]
    costs: dict[int, int] = {}
    chosen: set[int] = set()

    def worth(found: Iterable[str]) -> float:
        return math.fsum(weights[n] for n in found)  # exact, so the same in any set order

    def line_cost(i: int) -> int:
        n = costs.get(i)
        if n is None:
            n = costs[i] = counter.count_text(flat[i]) + 1
        return n

    def cost(unit: tuple[int, ...]) -> int:
        return sum(line_cost(i) for i in unit if i not in chosen)

    # A line many outputs repeat verbatim is the tool's boilerplate, not what it found.
    repeated = Counter(line for m in transcript[start:] if m.role == "tool" for line in _stripped(m.text))
    per_char = _tokens_per_char(flat, counter)
    heap: list[tuple[float, tuple[int, ...], frozenset[str], float, float]] = []
    seen: set[tuple[str, ...]] = set()
    for unit in _units(flat, starts):
        text = tuple(flat[i] for i in unit)
        found = frozenset().union(*(names[i] for i in unit))
        scale = 1 / max(repeated[text[-1]] - 1, 1)
        value = scale * worth(found)
        # Plain words alone (prose, a banner) the agent never wrote tell nothing worth a line.
        if text not in seen and value > 0 and any(n in telling for n in found):
            seen.add(text)
            # Queued by an estimate; counted only when it comes up (thousands of lines per pass).
            guess = _estimate(flat, unit, per_char)
            heapq.heappush(heap, (-value / guess, unit, found, scale, guess))
    exhausted = False
    while heap and budget > 0:
        _, unit, found, scale, guess = heapq.heappop(heap)
        value = scale * worth(found - covered)
        if value <= 0 or guess > 2 * budget:  # covered, or plainly too long: not counted
            continue
        if heap and value / guess < -heap[0][0]:  # worth less now (its names got covered): re-queue
            heapq.heappush(heap, (-value / guess, unit, found, scale, guess))
            continue
        spend = cost(unit)  # counted only when it is about to be taken
        if spend == 0:
            continue
        if heap and value / spend < -heap[0][0]:  # dearer than estimated: re-queue at its count
            heapq.heappush(heap, (-value / spend, unit, found, scale, spend))
            continue
        if spend > budget:
            exhausted = exhausted or value >= _AGENT * 0.5
            continue
        chosen.update(unit)
        covered |= found
        budget -= spend
    exhausted = exhausted or any(h[3] * worth(h[2] - covered) >= _AGENT for h in heap)
    return _render(flat, sorted(chosen)), exhausted


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
