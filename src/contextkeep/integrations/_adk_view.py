"""A contextkeep view mapped back onto an ADK request's contents.

A view message the compaction left as it was is matched, through its transcript id, with the
history message (and so the request content) it came from. Consecutive messages of one content
go back into one content, so parallel results stay together; a content whose messages are all
unchanged is the request's own object (thought signatures and whatever else ADK or the provider
put in it survive), a changed one is a new content keeping the original parts it can (function
calls, the result's call id and name), and one the view made (the summary, the dropped-rounds
marker) is a new text content.
"""

from __future__ import annotations

import base64
import json
import sys
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, NamedTuple, cast

from google.genai import types

from contextkeep._messages import ContentPart, Message, TextPart
from contextkeep.integrations._adk_contents import Converted
from contextkeep.integrations._bridge import common_prefix

__all__ = ["Rebuilt"]

_Member = tuple[Message, int, bool]
"""A view message, the index of its history message (-1: none), and whether the view left it as it was."""
_NEVER = sys.maxsize
"""The reach of a content rebuilt every call: it and what follows are not reused."""
_RESULTS, _ALONE = -1, -2
"""Owners of messages without a history message: results (grouped together), any other (alone)."""


class _Recipe(NamedTuple):
    """How the last view became contents, per content sent: what the next view may reuse."""

    view: list[Message]
    ends: list[int]
    """The index in the view after the content's last message."""
    sources: list[int | types.Content | None]
    """The request content's index (the request's own object), a content built for the view
    (kept while the view shows its messages), or None (one rebuilt every call)."""
    reach: list[int]
    """The highest request content index among the sources up to this one (-1: none yet;
    `_NEVER` from the first None on), so the contents from kept request contents are a prefix."""


class Rebuilt:
    """One conversation's views mapped back onto request contents.

    Contents built for messages the view changed or made are kept while the view shows them
    (ADK rebuilds its request for every call, the view's masked messages stay the same), so a
    long masked history costs a lookup per content, not a rebuild. At most `limit` are kept.
    The contents the last view began with (the same messages, from the same request contents)
    are taken again as they were mapped, so a call maps only the messages after them.
    """

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        """How many built contents are kept."""
        self._built: dict[tuple[str, ...], types.Content] = {}
        self._alignment: tuple[list[Message], list[Message], dict[str, int]] = ([], [], {})
        """The last transcript and history aligned, and how (`_aligned`)."""
        self._recipe = _Recipe([], [], [], [])
        self.mapped = 0
        """View messages mapped so far (the ones after what the last view began with)."""

    def contents(
        self, view: Sequence[Message], transcript: Sequence[Message], synced: Converted
    ) -> list[types.Content]:
        """`view` as contents of the request `synced` came from, on its own objects where unchanged.

        `transcript` is the session's, after the sync of `synced`: its newest messages are the
        history's, and the view names them by their transcript ids. A message with no history
        message behind it (made by the view, or older than where the history stops matching the
        transcript) is built from itself, calls and all; consecutive results go into one content.
        """
        at, kept = self._aligned(transcript, synced.messages)
        recipe = self._reused(view, synced) if kept else _Recipe([], [], [], [])
        start = recipe.ends[-1] if recipe.ends else 0
        self.mapped += len(view) - start
        reused = cast(list[int | types.Content], recipe.sources)  # `_reused` takes no None
        out = [synced.contents[s] if isinstance(s, int) else s for s in reused]
        places, messages = synced.places, synced.messages
        group: list[_Member] = []
        owner = _ALONE

        def add(content: types.Content, source: int | types.Content | None, end: int) -> None:
            out.append(content)
            recipe.ends.append(end)
            recipe.sources.append(source)
            own = source if isinstance(source, int) else -1 if source is not None else _NEVER
            recipe.reach.append(max(own, recipe.reach[-1] if recipe.reach else -1))

        for v in range(start, len(view)):
            m = view[v]
            i = at.get(m.id) if m.id is not None else None
            here = places[i].content if i is not None else _RESULTS if m.role == "tool" else _ALONE
            if group and (here != owner or here == _ALONE):
                add(*self._flush(group, owner, view, at, synced), v)
                group = []
            if i is not None and places[i].share == 1 and messages[i].key == m.key:
                add(synced.contents[here], here, v + 1)  # the usual case: the request's own content
                continue
            group.append((m, -1 if i is None else i, i is not None and messages[i].key == m.key))
            owner = here
        if group:
            add(*self._flush(group, owner, view, at, synced), len(view))
        self._recipe = recipe._replace(view=list(view))
        return out

    def _reused(self, view: Sequence[Message], synced: Converted) -> _Recipe:
        """The last recipe's contents this view can take as they were.

        They end before the first message this view does not share with the last one (the
        message after a content decided where it ended), come from contents of the request that
        kept their conversion, and were not rebuilt on the request's own parts.
        """
        last = self._recipe
        cut = min(
            bisect_left(last.ends, common_prefix(last.view, view)), bisect_left(last.reach, synced.kept)
        )
        return _Recipe([], last.ends[:cut], last.sources[:cut], last.reach[:cut])

    def _flush(
        self,
        group: Sequence[_Member],
        owner: int,
        view: Sequence[Message],
        at: Mapping[str, int],
        synced: Converted,
    ) -> tuple[types.Content, int | types.Content | None]:
        """The content of a group, and its source for the recipe."""
        if owner >= 0:
            return self._regroup(group, synced)
        key = ("made", *(m.key for m, _, _ in group))
        calls = _calls(view, at, synced) if owner == _RESULTS else {}
        built = self._built_for(key, partial(_made, [m for m, _, _ in group], calls))
        return built, built

    def _regroup(
        self, group: Sequence[_Member], synced: Converted
    ) -> tuple[types.Content, int | types.Content | None]:
        place = synced.places[group[0][1]]
        content = synced.contents[place.content]
        if all(same for _, _, same in group):
            if len(group) == place.share:
                return content, place.content
        elif not any(same for _, _, same in group):  # nothing of this request's own: built once
            key = ("changed", *(m.key for m, _, _ in group))
            built = self._built_for(key, partial(_content, content, group, synced))
            return built, built
        return _content(content, group, synced), None

    def _aligned(
        self, transcript: Sequence[Message], history: Sequence[Message]
    ) -> tuple[dict[str, int], bool]:
        """`_aligned`, walking only the messages added since the last call when the rest stayed.

        With the same messages before and the same offset between the two, the walk back from
        the newest reaches the old newest and goes on as it went then (its result is kept, and
        True says so).
        """
        stored, seen, known = self._alignment
        kept = False
        if (
            len(transcript) - len(history) == len(stored) - len(seen)
            and len(history) >= len(seen)
            and common_prefix(stored, transcript) == len(stored)
            and common_prefix(seen, history) == len(seen)
        ):
            at = _aligned(transcript, history, stop=len(seen))
            if len(at) == len(history) - len(seen):  # the new ones all matched
                at, kept = {**known, **at}, True
        else:
            at = _aligned(transcript, history)
        self._alignment = (list(transcript), list(history), at)
        return at, kept

    def _built_for(self, key: tuple[str, ...], build: Callable[[], types.Content]) -> types.Content:
        built = self._built.get(key)
        if built is None:
            if len(self._built) >= self.limit:
                self._built.clear()
            built = self._built[key] = build()
        return built


def _aligned(transcript: Sequence[Message], history: Sequence[Message], stop: int = 0) -> dict[str, int]:
    """Transcript id -> index in `history`, matching both from the newest message back (to `stop`)."""
    at: dict[str, int] = {}
    for stored, i in zip(reversed(transcript), range(len(history) - 1, stop - 1, -1), strict=False):
        if stored.id is None or stored.key != history[i].key:
            break
        at[stored.id] = i
    return at


def _originals(content: types.Content, parts: Sequence[int]) -> list[types.Part]:
    own = content.parts or []
    return [own[j] for j in parts]


def _content(content: types.Content, group: Sequence[_Member], synced: Converted) -> types.Content:
    parts: list[types.Part] = []
    for m, i, same in group:
        originals = _originals(content, synced.places[i].parts)
        parts += originals if same else _changed(m, originals)
    return types.Content(role=content.role, parts=parts)


def _calls(
    view: Sequence[Message], at: Mapping[str, int], synced: Converted
) -> dict[str, types.FunctionCall]:
    """The ADK call behind each call id of the view (a result the view made names its call)."""
    out: dict[str, types.FunctionCall] = {}
    for m in view:
        i = at.get(m.id) if m.tool_calls and m.id is not None else None
        if i is not None:
            place = synced.places[i]
            originals = _originals(synced.contents[place.content], place.parts)
            adk = [p.function_call for p in originals if p.function_call is not None]
            out.update(zip((c.id for c in m.tool_calls), adk, strict=False))
    return out


def _changed(m: Message, originals: Sequence[types.Part]) -> list[types.Part]:
    """The parts of a message the view changed (a tool result masked or cut, an image replaced)."""
    result = originals[0].function_response if m.role == "tool" else None
    if result is not None:
        update = {"function_response": result.model_copy(update={"response": {"result": m.text}})}
        return [originals[0].model_copy(update=update)]
    thoughts = [p for p in originals if p.thought] if m.reasoning else []
    return [*thoughts, *_new_parts(m), *(p for p in originals if p.function_call is not None)]


def _made(group: Sequence[Message], calls: Mapping[str, types.FunctionCall]) -> types.Content:
    """A content built from messages alone: consecutive results, or one other message."""
    first = group[0]
    if first.role == "tool":  # a result answers the request's own call, when it is there, by its id
        found = [calls.get(m.tool_call_id or "") for m in group]
        results = [
            types.FunctionResponse(
                id=call.id if call is not None else m.tool_call_id,
                name=m.name or (call.name if call is not None else None),
                response={"result": m.text},
            )
            for m, call in zip(group, found, strict=True)
        ]
        return types.Content(role="user", parts=[types.Part(function_response=r) for r in results])
    calls_made = [
        types.Part(function_call=types.FunctionCall(id=c.id, name=c.name, args=_args(c.arguments)))
        for c in first.tool_calls
    ]
    return types.Content(
        role="model" if first.role == "assistant" else "user", parts=_new_parts(first) + calls_made
    )


def _new_parts(m: Message) -> list[types.Part]:
    if m.content is None:
        return []
    if isinstance(m.content, str):
        return [types.Part(text=m.content)]
    return [_new_part(p) for p in m.content]


def _new_part(p: ContentPart) -> types.Part:
    if isinstance(p, TextPart):
        return types.Part(text=p.text)
    if p.url.startswith("data:") and ";base64," in p.url:
        head, data = p.url[5:].split(";base64,", 1)
        return types.Part(inline_data=types.Blob(data=base64.b64decode(data), mime_type=head or p.media_type))
    return types.Part(file_data=types.FileData(file_uri=p.url, mime_type=p.media_type))


def _args(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}
