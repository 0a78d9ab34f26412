"""Token counters: an encoder plus a framing, counted once per message.

:class:`PromptCounter` caches every message's count under (message content hash,
framing context) and remembers the previous prompt it counted: between
compactions a prompt only grows by appending, so counting call N costs work
proportional to what was appended since call N-1.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Protocol, runtime_checkable

from contextkeep._lineage import Lineage, extended_by, lineage_of
from contextkeep._messages import Message
from contextkeep._tokens.encoders import Encoder
from contextkeep._tokens.framing import FoldState, Framing, Tools

__all__ = ["CountSource", "IncrementalCounter", "PromptCounter", "TokenCounter"]


class CountSource(enum.StrEnum):
    """Where a token figure comes from."""

    LOCAL_TOKENIZER = "local_tokenizer"
    """Counted locally with the model's real tokenizer."""
    ESTIMATE = "estimate"
    """Estimated locally (heuristic, possibly calibrated)."""
    PROVIDER_CONFIRMED = "provider_confirmed"
    """Reported by the provider for a call it served."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the prompt tokens of a list of messages (and tool definitions)."""

    @property
    def id(self) -> str:
        """Stable identifier of the counting method."""
        ...

    @property
    def source(self) -> CountSource:
        """`LOCAL_TOKENIZER` for a real tokenizer, `ESTIMATE` otherwise."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of plain text."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens one message adds to a prompt, framing included (out of context)."""
        ...

    def count_prompt(self, messages: Sequence[Message], tools: Tools | None = None) -> int:
        """Tokens of the whole prompt, as the provider would count it."""
        ...


@runtime_checkable
class IncrementalCounter(TokenCounter, Protocol):
    """A counter that remembers the prompt it counted last, message by message.

    A compaction pass that has just counted a view reads its per-round tokens from
    here instead of counting each message again.
    """

    def last_totals(self, messages: Sequence[Message]) -> list[int] | None:
        """Cumulative message tokens (no tools) of `messages`, if they were counted last.

        Entry i covers messages 0..i. Only the very sequence object counted last has them;
        for any other, None.
        """
        ...


@dataclass(slots=True)
class _Prompt:
    """The last prompt counted, one entry per message (parallel lists: runs are copied in bulk)."""

    keys: list[str] = field(default_factory=list)
    contexts: list[Hashable] = field(default_factory=list)
    """Framing context each message was counted in."""
    states: list[FoldState] = field(default_factory=list)
    """Framing state after each message."""
    totals: list[int] = field(default_factory=list)
    """Tokens of messages 0..i."""
    users: list[int] = field(default_factory=list)
    """Index of the last user message at or before i (-1 if none)."""

    def head(self, n: int) -> _Prompt:
        return _Prompt(self.keys[:n], self.contexts[:n], self.states[:n], self.totals[:n], self.users[:n])


_REMEMBERED_TEXT = 4096
"""Plain texts at least this long keep their count (a str caches its hash: the lookup is cheap)."""


class PromptCounter:
    """A cached :class:`IncrementalCounter` built from an encoder and a framing."""

    def __init__(self, encoder: Encoder, framing: Framing, *, cache_size: int = 65_536) -> None:
        self.encoder = encoder
        self.framing = framing
        self.stand_in: Callable[[Message], Message | None] | None = None
        """What a later view may show in place of a message (its masked preview, framed alike: same
        role and tool calls). `warm` counts it in the context its message was counted in, so a
        compaction pass finds the count cached."""
        self.stand_in_settled: Callable[[Message], bool] | None = None
        """Whether `stand_in(message)` is final (None: always). One that depends on messages not
        added yet (a preview keeping the lines the agent's next calls name) is counted again by
        each later `warm` until it is."""
        self._cache: OrderedDict[tuple[str, Hashable, bool], int] = OrderedDict()
        self._unwarmed: list[tuple[Message, Hashable, bool]] = []
        self._stands_for: dict[str, str] = {}
        """Key of each stand-in counted ahead -> key of the message it stands in for."""
        self._texts: OrderedDict[str, int] = OrderedDict()
        self._encoded: dict[str, int] = {}
        """Key -> count of each message when last encoded, in whichever context (`counted`)."""
        self._cache_size = cache_size
        self._last = _Prompt()
        self._last_counted: Sequence[Message] = ()
        """The sequence object counted last (`last_totals` answers for it only)."""
        self._last_messages: list[Message] = []
        """A copy of its messages (the caller may edit its list in place before the next count), kept
        in step by appending when the next prompt extends it."""
        self._lineage: Lineage | None = None
        """The lineage of the sequence counted last, if it had one (`contextkeep._lineage`)."""
        self._last_has_tools = False
        self._tools_ref: tuple[Tools | None, int] = (None, 0)
        self._tools_text: tuple[str | None, int] = (None, 0)

    @property
    def id(self) -> str:
        """`encoder/framing`: identifies the counts this counter makes."""
        return f"{self.encoder.name}/{self.framing.name}"

    @property
    def source(self) -> CountSource:
        """A local tokenizer's count when the encoder is exact, an estimate otherwise."""
        return CountSource.LOCAL_TOKENIZER if self.encoder.exact else CountSource.ESTIMATE

    def count_text(self, text: str) -> int:
        """Tokens of `text` (long texts are remembered: a tool result is counted more than once)."""
        if len(text) < _REMEMBERED_TEXT:
            return self.encoder.count(text)
        # A long tool result is counted for layer 0 and again for its event: encode it once.
        n = self._texts.get(text)
        if n is None:
            n = self._texts[text] = self.encoder.count(text)
            if len(self._texts) > 64:
                self._texts.popitem(last=False)
        return n

    def count_message(self, message: Message) -> int:
        """Tokens of one message with its framing, as if it opened a prompt."""
        context, _ = self.framing.step(message, FoldState(), has_tools=False)
        return self._message(message, context, True)

    def count_tools(self, tools: Tools | None) -> int:
        """Per-request tokens: tool definitions and the framing's constants."""
        if tools is not None and self._tools_ref[0] is tools:
            return self._tools_ref[1]
        text, extra = self.framing.fixed(tools)
        if self._tools_text[0] != text:
            self._tools_text = (text, self.encoder.count(text) + extra)
        self._tools_ref = (tools, self._tools_text[1])
        return self._tools_text[1]

    def count_prompt(self, messages: Sequence[Message], tools: Tools | None = None) -> int:
        """Tokens of a whole prompt; the prefix shared with the last count is not encoded again."""
        has_tools = bool(tools)
        old = self._last if has_tools == self._last_has_tools else _Prompt()
        reuse, mirrored = self._reusable_prefix(messages, old)
        turn_sensitive = self.framing.turn_sensitive
        if reuse < len(messages) == len(old.keys) and not turn_sensitive:
            # Messages rewritten in place (masking): when the framing states stay, only their counts change.
            rewritten = self._rewritten(messages, old, reuse, has_tools)
            if rewritten is not None:
                self._remember(rewritten, messages, mirrored)
                return rewritten.totals[-1] + self.count_tools(tools)
        new = old if reuse == len(old.keys) else old.head(reuse)  # appending only: extend in place
        state = new.states[-1] if reuse else FoldState()
        total = new.totals[-1] if reuse else 0
        seen_user = new.users[-1] if reuse else -1
        last_user = _last_user(messages, reuse, seen_user) if turn_sensitive else -1
        # Past the common prefix, line the previous prompt up with this one by their ends: a
        # compaction changes the front and the middle, the newest messages stay where they were.
        n_old = len(old.keys)
        shift = n_old - len(messages)
        reusable = not turn_sensitive  # with a turn-sensitive framing, a count depends on later messages
        i = reuse
        while i < len(messages):
            j = i + shift
            if reusable and 0 <= j < n_old and old.keys[j] == messages[i].key and state == _before(old, j):
                # A run of the same messages from the same framing state: the same counts, copied.
                k = j + 1
                while k < n_old and old.keys[k] == messages[k - shift].key:
                    k += 1
                delta = total - (old.totals[j - 1] if j else 0)
                new.keys += old.keys[j:k]
                new.contexts += old.contexts[j:k]
                new.states += old.states[j:k]
                new.totals += [t + delta for t in old.totals[j:k]]
                new.users += [u - shift if u >= j else seen_user for u in old.users[j:k]]
                state, total, seen_user, i = new.states[-1], new.totals[-1], new.users[-1], k - shift
                continue
            m = messages[i]
            context, state = self.framing.step(m, state, has_tools=has_tools)
            in_last_turn = i >= last_user if m.role != "user" else i == last_user
            total += self._message(m, context, in_last_turn or not turn_sensitive)
            seen_user = i if m.role == "user" else seen_user
            new.keys.append(m.key)
            new.contexts.append(context)
            new.states.append(state)
            new.totals.append(total)
            new.users.append(seen_user)
            i += 1
        self._remember(new, messages, mirrored)
        self._last_has_tools = has_tools
        return total + self.count_tools(tools)

    def last_totals(self, messages: Sequence[Message]) -> list[int] | None:
        """Cumulative message tokens (no tools) of `messages` if they are the very sequence counted last.

        Entry i covers messages 0..i; None unless `messages` is the same object as the one counted last,
        unchanged in length (a view builder extends its list in place for the next view).
        """
        totals = self._last.totals
        return list(totals) if messages is self._last_counted and len(messages) == len(totals) else None

    def counted(self, message: Message) -> int | None:
        """Tokens of `message` (framing included) when it was last encoded, if it was."""
        return self._encoded.get(message.key)

    def _remember(self, prompt: _Prompt, messages: Sequence[Message], mirrored: bool) -> None:
        """`mirrored`: `_last_messages` already holds exactly `messages` (no copy needed)."""
        self._last, self._last_counted, self._lineage = prompt, messages, lineage_of(messages)
        if not mirrored:
            self._last_messages = list(messages)

    def _rewritten(
        self, messages: Sequence[Message], old: _Prompt, start: int, has_tools: bool
    ) -> _Prompt | None:
        """`old` with the messages that differ from `start` on counted anew, or None if the framing changed.

        Only for framings that are not turn-sensitive (the only ones that read `users`).
        """
        keys = [m.key for m in messages]
        contexts, states, totals, users = list(old.contexts), old.states, old.totals, old.users
        deltas = [0] * (len(keys) - start)
        cache, stands_for = self._cache, self._stands_for
        for i in range(start, len(keys)):
            key = keys[i]
            if key == old.keys[i]:
                continue
            was = totals[i] - (totals[i - 1] if i else 0)
            if stands_for.get(key) == old.keys[i]:  # a stand-in counted ahead, in this very context
                n = cache.get((key, contexts[i], True))
                if n is not None:
                    deltas[i - start] = n - was
                    continue
            m = messages[i]
            context, state = self.framing.step(m, _before(old, i), has_tools=has_tools)
            if state != states[i]:
                return None
            contexts[i] = context
            deltas[i - start] = self._message(m, context, True) - was
        shifted = [t + d for t, d in zip(totals[start:], accumulate(deltas), strict=True)]
        return _Prompt(keys, contexts, states, totals[:start] + shifted, users)

    def _reusable_prefix(self, messages: Sequence[Message], old: _Prompt) -> tuple[int, bool]:
        """How many leading messages keep their counts, and whether `_last_messages` mirrors `messages`."""
        n = min(len(old.keys), len(messages))
        last = self._last_messages
        if old is self._last and n == len(old.keys) == len(last) and extended_by(messages, self._lineage):
            last += messages[n:]  # the builder vouches: the last view plus appended messages
            return self._turn_start(messages, old, n), True
        # The common case, appending to the same message objects: a list comparison that stops at
        # identity (rebuilt messages would be compared field by field: they go by their keys).
        same_objects = old is self._last and n > 0 and messages[n - 1] is last[n - 1]
        mirrored = same_objects and self._extends_last(messages, n)
        if mirrored or (same_objects and list(messages[:n]) == last[:n]):
            i = n
        else:
            keys = [m.key for m in messages[:n]]
            differ = (j for j, (a, b) in enumerate(zip(keys, old.keys, strict=False)) if a != b)
            i = n if keys == old.keys[:n] else next(differ)
        return self._turn_start(messages, old, i), mirrored

    def _turn_start(self, messages: Sequence[Message], old: _Prompt, i: int) -> int:
        """`i`, or the start of the last turn when a new user message changes how it renders."""
        if self.framing.turn_sensitive and any(m.role == "user" for m in messages[i:]):
            return min(i, max(old.users[i - 1], 0) if i else 0)
        return i

    def _extends_last(self, messages: Sequence[Message], n: int) -> bool:
        """Whether the list `messages` is the last one counted plus appended messages; then it is mirrored.

        The appended messages are added to the copy first, so one C-level comparison of two equally long
        lists decides, with no copy of the history (a call's view is the last one plus what it added).
        """
        last = self._last_messages
        if n != len(last) or not isinstance(messages, list):
            return False
        last += messages[n:]
        if last == messages:
            return True
        del last[n:]
        return False

    def _store(self, key: tuple[str, Hashable, bool], n: int) -> None:
        self._cache[key] = n
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _message(self, message: Message, context: Hashable, in_last_turn: bool) -> int:
        key = (message.key, context, in_last_turn)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        text, extra = self.framing.render(message, context, in_last_turn=in_last_turn)
        n = self.encoder.count(text) + extra
        self._store(key, n)
        if len(self._encoded) >= self._cache_size:
            self._encoded.clear()
        self._encoded[message.key] = n
        if self.stand_in is not None and len(self._unwarmed) < self._cache_size:
            self._unwarmed.append((message, context, in_last_turn))
        return n

    def warm(self) -> None:
        """Count the stand-ins of the messages counted since the last call.

        Off the hot path: a session schedules it after preparing a view, so it runs while the
        model call is in flight. Counts are pure, so when it runs changes nothing but speed.
        A message whose stand-in is not settled yet stays for the next call.
        """
        pending, self._unwarmed = self._unwarmed, []
        settled = self.stand_in_settled
        later = []
        for item in pending:
            message, context, in_last_turn = item
            other = self.stand_in(message) if self.stand_in is not None else None
            if other is not None and other.key != message.key:
                self._message(other, context, in_last_turn)
                if len(self._stands_for) >= self._cache_size:
                    self._stands_for.clear()
                self._stands_for[other.key] = message.key
            if settled is not None and not settled(message):
                later.append(item)
        self._unwarmed[:0] = later


def _before(prompt: _Prompt, j: int) -> FoldState:
    """The framing state before message `j`."""
    return prompt.states[j - 1] if j else FoldState()


def _last_user(messages: Sequence[Message], start: int, before: int) -> int:
    """Index of the last user message, scanning only `messages[start:]`."""
    for i in range(len(messages) - 1, start - 1, -1):
        if messages[i].role == "user":
            return i
    return before
