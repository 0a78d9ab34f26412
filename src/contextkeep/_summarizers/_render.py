"""Structured summary data → text, and keeping that text within a token bound.

Shared by both summarisers so an LLM summary and an extractive one read the same.
A summary's data maps field names to a string or a list of strings; the text is one
`## Title` section per non-empty field, lists as `- ` bullets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextkeep._tokens import TokenCounter

__all__ = ["abridge", "abridge_tokens", "field_title", "fit_summary", "render_summary"]

_MIN_ITEM_CHARS = 40
"""Shortest an item is cut to before whole items are dropped instead."""

Drop = tuple[str, int]
"""(field, list index) of an item that may be dropped; index -1 clears a string field."""


def field_title(name: str) -> str:
    """`task_overview` → `Task overview`."""
    words = name.replace("_", " ").strip()
    return words[:1].upper() + words[1:]


def _item_text(item: Any) -> str:
    return item if isinstance(item, str) else json.dumps(item, ensure_ascii=False, sort_keys=True)


def _bullet(item: Any) -> str:
    # Continuation lines are indented so a multi-line item stays one bullet.
    return "- " + _item_text(item).strip().replace("\n", "\n  ")


def render_summary(data: Mapping[str, Any], fields: Sequence[str] = ()) -> str:
    """The summary text: `fields` first in that order, then any other keys in data order."""
    order = [f for f in fields if f in data] + [k for k in data if k not in fields]
    sections: list[str] = []
    for name in order:
        value = data[name]
        if isinstance(value, list | tuple):
            body = "\n".join(_bullet(v) for v in value if _item_text(v).strip())
        else:
            body = "" if value is None else _item_text(value).strip()
        if body:
            sections.append(f"## {field_title(name)}\n{body}")
    return "\n\n".join(sections)


def abridge(text: str, max_chars: int, head_share: float = 0.5) -> str:
    """At most `max_chars` characters: head and tail around a marker giving what was left out."""
    if len(text) <= max_chars:
        return text
    marker = f" […{len(text) - max_chars} chars omitted…] "
    keep = max(max_chars - len(marker), 2)
    head = max(int(keep * head_share), 1)
    return text[:head] + marker + text[len(text) - (keep - head) :]


def abridge_tokens(text: str, counter: TokenCounter, max_tokens: int, head_share: float = 0.5) -> str:
    """`text` abridged to at most `max_tokens` tokens (searching the character length)."""
    if counter.count_text(text) <= max_tokens:
        return text
    chars = _largest(0, len(text), lambda n: counter.count_text(abridge(text, n, head_share)) <= max_tokens)
    return abridge(text, chars, head_share) if chars > 0 else ""


def _largest(lo: int, hi: int, fits: Callable[[int], bool]) -> int:
    """Largest n in [lo, hi] with fits(n), assuming fits is monotone decreasing; lo if none."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _without(data: Mapping[str, Any], drops: Sequence[Drop]) -> dict[str, Any]:
    gone: dict[str, set[int]] = {}
    for name, index in drops:
        gone.setdefault(name, set()).add(index)
    out: dict[str, Any] = {}
    for name, value in data.items():
        if name not in gone:
            out[name] = value
        elif isinstance(value, list | tuple):
            out[name] = [v for i, v in enumerate(value) if i not in gone[name]]
        else:
            out[name] = "" if -1 in gone[name] else value
    return out


def _capped(data: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    def cap(v: Any) -> Any:
        return abridge(v, max_chars) if isinstance(v, str) else v

    return {k: [cap(i) for i in v] if isinstance(v, list | tuple) else cap(v) for k, v in data.items()}


def _tail_drops(data: Mapping[str, Any], fields: Sequence[str]) -> list[Drop]:
    """Every item, last field first and last item first: what goes when nothing else helps."""
    order = [f for f in fields if f in data] + [k for k in data if k not in fields]
    drops: list[Drop] = []
    for name in reversed(order):
        value = data[name]
        if isinstance(value, list | tuple):
            drops.extend((name, i) for i in reversed(range(len(value))))
        else:
            drops.append((name, -1))
    return drops


def fit_summary(
    data: Mapping[str, Any],
    counter: TokenCounter,
    max_tokens: int,
    *,
    fields: Sequence[str] = (),
    drop_order: Sequence[Drop] = (),
) -> tuple[dict[str, Any], str]:
    """Data and its rendered text, with the text at most `max_tokens` tokens.

    When over, in turn: drop the items of `drop_order` (least important first), as few
    as needed; cut every item to one shared length, as long as possible; drop what is
    left from the end. The returned text is always the rendering of the returned data.
    """

    def size(d: Mapping[str, Any]) -> int:
        return counter.count_text(render_summary(d, fields))

    current = dict(data)
    if size(current) <= max_tokens:
        return current, render_summary(current, fields)
    if drop_order:
        n = len(drop_order)
        kept = _largest(0, n, lambda k: size(_without(data, drop_order[: n - k])) <= max_tokens)
        current = _without(data, drop_order[: n - kept])
        if size(current) <= max_tokens:
            return current, render_summary(current, fields)
    longest = max((len(_item_text(v)) for v in _items(current)), default=0)
    chars = _largest(_MIN_ITEM_CHARS, longest, lambda c: size(_capped(current, c)) <= max_tokens)
    current = _capped(current, chars)
    if size(current) > max_tokens:
        tail = _tail_drops(current, fields)
        kept = _largest(0, len(tail), lambda k: size(_without(current, tail[: len(tail) - k])) <= max_tokens)
        current = _without(current, tail[: len(tail) - kept])
    return current, render_summary(current, fields)


def _items(data: Mapping[str, Any]) -> list[Any]:
    return [i for v in data.values() for i in (v if isinstance(v, list | tuple) else [v])]
