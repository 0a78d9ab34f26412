"""The working-set digest: what stays of dropped rounds besides the marker, verbatim and model-free.

Two parts, within a token budget. First the agent's own commands from the dropped rounds,
one line each (a heredoc's or script's body left out), each with the reference to its own
output, so one `recall` fetches the output a command produced. Then whole lines of the
dropped outputs and of the agent's code, chosen greedily by value per token: a line is
worth the names in it that no chosen line holds yet, and a name is worth most when the
agent itself wrote it (decayed by how long ago), then by how many outputs it recurs in.
Names the kept rounds show are worth little: they are in view anyway.
"""

from __future__ import annotations

import heapq
import math
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

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

_COMMAND_CHARS = 160
_LINE_CHARS = 240
_COMMAND_SHARE = 0.5
_HALF_LIFE = 60.0
"""Agent messages after which a name the agent wrote is worth half as much."""
_AGENT, _RECUR, _SEEN = 3.0, 0.6, 0.15
_HEAD = "Working set of the removed rounds (verbatim). Commands, each with its output:"
_LINES_HEAD = "Lines from their outputs and code:"
_LEFT_OUT = "- ({} earlier command(s) left out)"
_NOTES = re.compile(r"- \(\d+ earlier command\(s\) left out\)")


@dataclass(frozen=True, slots=True)
class RoundCommand:
    """One command of the index: what produced an output, and where the output is."""

    index: int
    """Transcript index of the assistant message that made the call."""
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
        RoundCommand(i, _first_line(command_text(c)), refs.get(c.id, ""))
        for i in range(start, end)
        for c in transcript[i].tool_calls
    ]


def _first_line(text: str) -> str:
    line = text.strip().split("\n", 1)[0].strip()
    return line if len(line) <= _COMMAND_CHARS else line[: _COMMAND_CHARS - 1] + "…"


def _weights(transcript: Sequence[Message], end: int) -> dict[str, float]:
    """What each name is worth: the agent's own use (recent most), then recurrence across outputs.

    Scaled by rarity (names in most messages, plain words, say little); names the kept
    rounds show are in view anyway.
    """
    agent: dict[str, float] = {}
    said = [m for m in transcript if m.role == "assistant"]
    for age, m in enumerate(reversed(said)):
        decay = 0.5 ** (age / _HALF_LIFE)
        for n in names_in(m.text + "".join(command_text(c) for c in m.tool_calls)):
            agent[n] = min(agent.get(n, 0.0) + decay, 2.0)
    spread = Counter(n for m in transcript for n in names_in(m.text))
    recur = Counter(n for m in transcript[:end] if m.role == "tool" for n in names_in(m.text))
    shown = {n for m in transcript[end:] for n in names_in(m.text)}
    weights = {}
    for n in set(agent) | set(recur):
        w = _AGENT * agent.get(n, 0.0) + (_RECUR * min(math.log2(recur[n]), 3.0) if recur[n] > 1 else 0.0)
        rarity = math.log2(1 + len(transcript) / max(spread[n], 1))
        if w > 0:
            weights[n] = w * rarity * (_SEEN if n in shown else 1.0)
    return weights


def _candidate_lines(transcript: Sequence[Message], start: int, end: int) -> Iterator[str]:
    """Whole lines of the dropped outputs and of the bodies of the agent's commands, in order."""
    for m in transcript[start:end]:
        if m.role == "tool":
            yield from m.text.splitlines()
        for c in m.tool_calls:
            yield from command_text(c).splitlines()[1:]


def build_digest(
    transcript: Sequence[Message], start: int, end: int, counter: TokenCounter, budget: int
) -> Digest:
    """The digest of the dropped `transcript[start:end]` in at most about `budget` tokens."""
    if budget <= 0 or end <= start:
        return Digest("", False)
    commands = command_index(transcript, start, end)
    lines = [
        f"- {c.command}" + (f" → {detail_reference(c.reference)}" if c.reference else "") for c in commands
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
    picked, exhausted = _pick_lines(transcript, start, end, counter, left)
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


def _pick_lines(
    transcript: Sequence[Message], start: int, end: int, counter: TokenCounter, budget: int
) -> tuple[list[str], bool]:
    """Greedy by value per token, lazily re-valued (values only fall as names get covered)."""
    weights = _weights(transcript, end)
    seen: set[str] = set()
    heap: list[tuple[float, int, str, frozenset[str], int]] = []
    for order, raw in enumerate(_candidate_lines(transcript, start, end)):
        line = raw.strip()
        if len(line) < 8 or len(line) > _LINE_CHARS or line in seen:
            continue
        seen.add(line)
        names = frozenset(n for n in names_in(line) if n in weights)
        value = sum(weights[n] for n in names)
        if value <= 0:
            continue
        cost = counter.count_text(line) + 1
        heapq.heappush(heap, (-value / cost, order, line, names, cost))
    covered: set[str] = set()
    chosen: list[tuple[int, str]] = []
    exhausted = False
    while heap and budget > 0:
        _, order, line, names, cost = heapq.heappop(heap)
        value = sum(weights[n] for n in names - covered)
        if value <= 0:
            continue
        if heap and value / cost < -heap[0][0]:
            heapq.heappush(heap, (-value / cost, order, line, names, cost))  # worth less now: re-queue
            continue
        if cost > budget:
            exhausted = exhausted or value >= _AGENT * 0.5
            continue
        chosen.append((order, line))
        covered |= names
        budget -= cost
    exhausted = exhausted or any(sum(weights[n] for n in h[3] - covered) >= _AGENT for h in heap)
    return [line for _, line in sorted(chosen)], exhausted
