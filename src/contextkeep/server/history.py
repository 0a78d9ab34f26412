"""Which messages of a proxied request are new: the rule the proxy appends by.

An OpenAI-compatible client sends its whole history with every request. The
conversation's stored transcript holds what earlier requests added plus every
reply the proxy recorded. Messages are compared by a fingerprint of what the
model sees of them (role, text, tool-call ids and names, the result's call id),
so ids, metadata and reasoning a client drops or adds do not matter.

1. The transcript is a prefix of the request: the rest of the request is new.
2. Otherwise the client changed older history itself (trimmed it, rewrote the
   system prompt): if the latest recorded assistant reply is in the request, what
   follows its last occurrence is new. The transcript keeps the original history;
   the client's edits to it are not applied (the transcript is append-only).
3. Otherwise the request does not continue this conversation (e.g. the client never
   received the last reply and retried, or reused the id): :func:`new_messages`
   returns ``None`` and the proxy answers 409 without calling the model.
"""

from __future__ import annotations

from collections.abc import Sequence

from contextkeep.messages import Message

__all__ = ["fingerprint", "new_messages"]

Fingerprint = tuple[str, str, tuple[tuple[str, str], ...], str | None]


def fingerprint(m: Message) -> Fingerprint:
    """What identifies a message across requests."""
    return (m.role, m.text.strip(), tuple((c.id, c.name) for c in m.tool_calls), m.tool_call_id)


def new_messages(stored: Sequence[Message], incoming: Sequence[Message]) -> list[Message] | None:
    """The messages of `incoming` to append after `stored`; `None` when it does not continue it."""
    known = [fingerprint(m) for m in stored]
    seen = [fingerprint(m) for m in incoming]
    if seen[: len(known)] == known:
        return list(incoming[len(known) :])
    last_reply = next((f for f in reversed(known) if f[0] == "assistant"), None)
    if last_reply is None:
        return None
    for i in range(len(seen) - 1, -1, -1):
        if seen[i] == last_reply:
            return list(incoming[i + 1 :])
    return None
