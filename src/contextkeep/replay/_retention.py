"""Future-reference retention (FRR): does a view still hold the terms a later reply reuses?

A term is an identifier, file path, number or error name (:func:`extract_terms`). A
reply's term whose first occurrence compaction removed or shortened is a
:class:`RetentionProbe`. It is *in view* when it occurs anywhere in the view, *whole* when
it occurs there as a whole token, *in context* when the view holds it with the text that
surrounded it earlier (:mod:`contextkeep.replay._context`), and *recoverable* when it is
in view or behind one reference to a single output that the view shows with the command
that produced it. Every text is compared after :func:`normalise` (JSON escapes decoded,
whitespace runs made one space).
"""

from __future__ import annotations

import json
import logging
import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from contextkeep._compaction._digest import command_text
from contextkeep._errors import ContextKeepError
from contextkeep._messages import Message, message_from_dict
from contextkeep._offload.workspace import Workspace
from contextkeep.replay._context import ContextIndex, normalise, presence, whole_pattern
from contextkeep.replay.engine import references_in

__all__ = ["Retention", "RetentionProbe", "extract_terms", "searchable"]

logger = logging.getLogger("contextkeep.replay.metrics")

# A command is named next to its output when the line with the reference holds this much of it.
_COMMAND_CHARS = 32

_TERM_PATTERNS = (
    r"[\w.-]*\w/[\w./-]*\w",  # file paths: at least one slash between word characters
    r"\b\w+\.(?:py|pyi|txt|cfg|toml|ini|json|ya?ml|md|rst|sh|js|ts|c|h|go|rs|java|html|css|sql)\b",
    r"\b\w*(?:Error|Exception|Warning)\b",  # error names
    r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b",  # dotted names (module.attr, self.x)
    r"\b[A-Za-z]*_\w*[A-Za-z0-9]\b",  # snake_case identifiers
    r"\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b",  # camelCase and CamelCase identifiers
    r"(?<![\w.])\d+\.\d+(?![\w.])|(?<![\w.])\d{3,}(?![\w.])",  # decimals, integers of 3+ digits
)
_TERMS = re.compile("|".join(f"(?:{p})" for p in _TERM_PATTERNS))


def extract_terms(text: str) -> set[str]:
    """The identifiers, file paths, numbers and error names in `text`.

    Exactly the matches of these patterns, each 4+ characters long except numbers:
    file paths (word characters around at least one `/`, or a name with a known file
    extension), error names (`…Error`, `…Exception`, `…Warning`), dotted names
    (`a.b`), snake_case names (containing `_`), camelCase / CamelCase names (an inner
    capital), decimals (`3.14`) and integers of three or more digits.
    """
    return {t for t in _TERMS.findall(text) if len(t) >= 4 or t[0].isdigit()}


def searchable(message: Message) -> str:
    """The text a term is looked for in: the content plus every tool call's name and arguments, normalised."""
    calls = "".join(f"\n{c.name} {c.arguments}" for c in message.tool_calls)
    return normalise(message.text + calls)


@dataclass(frozen=True, slots=True)
class RetentionProbe:
    """One FRR probe: a term a later reply uses whose first occurrence compaction removed or shortened.

    For the reply produced by call `call` (transcript index `reply`), each term of
    :func:`extract_terms` in the reply's searchable text whose first occurrence (the
    lowest transcript index whose searchable text contains it as a whole token) lies in an
    earlier message that the call's view does not show verbatim is a probe.
    """

    call: int
    """Position of the call in the replay."""
    term: str
    """The term."""
    first: int
    """Transcript index of the term's first occurrence."""
    in_view: bool
    """The term occurs anywhere in the view's searchable text."""
    references: tuple[str, ...] = ()
    """References the view shows inside tool results (so next to the call that produced them)."""
    recoverable: bool = False
    """In view, or behind one reference of `references` or `listed`."""
    whole: bool = False
    """The term occurs in the view as a whole token (no word character glued to it)."""
    in_context: bool = False
    """The view holds the term with `CONTEXT_CHARS` characters of its earlier surroundings."""
    listed: tuple[tuple[str, str], ...] = ()
    """(reference, the view's line naming it) outside tool results: recoverable only when the
    text behind the reference is one output and the line quotes the command that produced it."""


class Retention:
    """Finds the FRR probes of a trajectory's replies."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self._messages = messages
        texts = [searchable(m) for m in messages]
        self._first = _FirstSeen(texts)
        self._context = ContextIndex(texts)
        self._ids = [_transcript_id(m, i) for i, m in enumerate(messages)]
        self._commands = _commands(messages)

    def probes(self, call: int, index: int, view: Sequence[Message]) -> list[RetentionProbe]:
        """The probes of transcript message `index` (the reply of call `call`) against its `view`."""
        verbatim = {m.id: m.key for m in view if m.id}
        text = "\x00".join(searchable(m) for m in view)
        references: tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None = None
        out = []
        for term in sorted(extract_terms(searchable(self._messages[index]))):
            first = self._first(term)
            if not 0 <= first < index:
                continue
            original = self._messages[first]
            if verbatim.get(self._ids[first]) == original.key:
                continue  # shown as recorded: nothing was removed or shortened
            present = term in text
            whole, in_context = (False, False)
            if present:
                whole, in_context = presence(term, text, self._context.before(term, index))
            if not present and references is None:
                references = _view_references(view)
            own, listed = ((), ()) if present or references is None else references
            out.append(RetentionProbe(call, term, first, present, own, present, whole, in_context, listed))
        return out

    async def resolve(
        self, probe: RetentionProbe, workspace: Workspace, texts: dict[str, str]
    ) -> RetentionProbe:
        """`probe` with `recoverable` set: in view, or found behind one reference to one output.

        `texts` caches the searchable text behind each reference read so far.
        """
        found = probe.in_view
        for ref in probe.references:
            if found:
                break
            found = probe.term in await _cached_text(workspace, ref, texts)
        for ref, line in probe.listed:
            if found:
                break
            behind = await _cached_text(workspace, ref, texts)
            command = self._commands.get(behind)
            found = command is not None and command[:_COMMAND_CHARS] in line and probe.term in behind
        return RetentionProbe(
            probe.call,
            probe.term,
            probe.first,
            probe.in_view,
            probe.references,
            found,
            probe.whole,
            probe.in_context,
            probe.listed,
        )


def _view_references(view: Sequence[Message]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """References inside tool results, and (reference, line) pairs elsewhere in `view`."""
    own = [r for m in view if m.role == "tool" for r in references_in([m])]
    listed = [
        (r, normalise(line))
        for m in view
        if m.role != "tool"
        for line in m.text.splitlines()
        for r in references_in([Message(role="user", content=line)])
    ]
    return tuple(dict.fromkeys(own)), tuple(dict.fromkeys(listed))


def _commands(messages: Sequence[Message]) -> dict[str, str]:
    """The searchable text of each tool output → the normalised command (arguments) that produced it."""
    calls = {c.id: c for m in messages for c in m.tool_calls}
    out: dict[str, str] = {}
    for m in messages:
        call = calls.get(m.tool_call_id or "")
        if m.role == "tool" and call is not None:
            out.setdefault(searchable(m), normalise(command_text(call)))
    return out


async def _cached_text(workspace: Workspace, reference: str, texts: dict[str, str]) -> str:
    if reference not in texts:
        texts[reference] = await _reference_text(workspace, reference)
    return texts[reference]


def _transcript_id(message: Message, index: int) -> str:
    # Session.add stamps messages without an id with their transcript position.
    return message.id or f"m{index:06d}"


class _FirstSeen:
    """Transcript index of each term's first occurrence (one search of the concatenated text)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self._starts: list[int] = []
        position = 0
        for t in texts:
            self._starts.append(position)
            position += len(t) + 1
        self._text = "\x00".join(texts)
        self._cache: dict[str, int] = {}

    def __call__(self, term: str) -> int:
        found = self._cache.get(term)
        if found is None:
            # As a whole token: `200` inside `100,200p` is not the item a later `200` reuses (a view
            # keeping that text verbatim could not pass the whole-token and context tests with it).
            match = whole_pattern(term).search(self._text)
            found = self._cache[term] = bisect_right(self._starts, match.start()) - 1 if match else -1
        return found


async def _reference_text(workspace: Workspace, reference: str) -> str:
    """The searchable text behind a reference (offloaded message spans are decoded from JSONL)."""
    try:
        raw = await workspace.read(reference)
    except ContextKeepError as exc:
        logger.warning("reference %s unreadable: %s", reference, exc)
        return ""
    if ".jsonl" not in reference:
        return normalise(raw)
    lines = (json.loads(line) for line in raw.splitlines() if line.strip())
    return "\x00".join(searchable(message_from_dict(d)) for d in lines)
