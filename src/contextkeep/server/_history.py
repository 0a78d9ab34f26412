"""A conversation's past as the dashboard replays it on load: budget lines, calls, savings, events.

Everything comes from what the store keeps (compaction records, the usage documents, the
transcript) plus the views this server proxied lately; nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextkeep._compacting import pass_trigger
from contextkeep._compaction.state import CompactionRecord
from contextkeep._messages import Message
from contextkeep._session import Session
from contextkeep.server.views import CurrentView, describe_message
from contextkeep.server.watch import replayed_events

__all__ = ["history", "last_activity"]

_TRUNCATED = "truncated"


def _lines(session: Session) -> dict[str, Any]:
    """The window, where its figure came from, and the trigger/target/budget lines in tokens."""
    budget = session.budget()
    return {
        "window": budget.context_window,
        "capacity_source": budget.capacity_source.value,
        "reserved_output": budget.reserved_output,
        "budget": budget.effective,
        "trigger": pass_trigger(budget, session.config),
        "target": budget.tokens_at(session.config.target_ratio),
    }


def _saved(session: Session, view: CurrentView) -> dict[str, int]:
    """Tokens saved per layer: each record's before − after, and L0's cuts of the current view's results."""
    saved: dict[str, int] = {}
    for r in session.state.records:
        saved[r.layer] = saved.get(r.layer, 0) + max(r.tokens_before - r.tokens_after, 0)
    by_id: Mapping[str | None, Message] = {m.id: m for m in session.transcript if m.id}
    count = session.counter.count_text
    for m in view.messages:
        original = by_id.get(m.id)
        if original is not None and describe_message(m, original)["kind"] == _TRUNCATED:
            saved["L0"] = saved.get("L0", 0) + max(count(original.text) - count(m.text), 0)
    return saved


def _series(
    records: Sequence[CompactionRecord], calls: Sequence[Mapping[str, Any]], view_tokens: int
) -> dict[str, Any]:
    """The chart's points and compaction markers (`at` = index of the point a marker stands on).

    With proxied calls, one point per call, and a compaction on the first call sent after it
    (one older than the oldest call kept is left out unless that call is the first).
    Without (another process calls the model), the store keeps no per-call figure: each
    record gives its before and after, and the next view closes the line.
    """
    if calls:
        points = [{"call": c["call"], "tokens": c["tokens"]} for c in calls]
        markers = []
        since = 0.0 if calls[0]["call"] == 1 else calls[0]["at"]
        for r in records:
            after = next((i for i, c in enumerate(calls) if c["at"] >= r.at), None)
            if after is not None and r.at >= since:
                markers.append({"at": after, "layer": r.layer})
        return {"unit": "call", "points": points, "markers": markers}
    points, markers = [], []
    for r in records:
        points += [{"call": None, "tokens": r.tokens_before}, {"call": None, "tokens": r.tokens_after}]
        markers.append({"at": len(points) - 1, "layer": r.layer})
    points.append({"call": None, "tokens": view_tokens})
    return {"unit": "compaction", "points": points, "markers": markers}


def last_activity(records: Sequence[Mapping[str, Any]], calls: Sequence[Mapping[str, Any]]) -> float:
    """Unix time of the newest compaction record or proxied call (0 when neither exists)."""
    return max((float(x["at"]) for x in (*records, *calls)), default=0.0)


async def history(session: Session, view: CurrentView, calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The replay document of `GET /api/conversations/{id}/history` (see its docs)."""
    events = await replayed_events(session)
    return {
        "conversation_id": session.conversation_id,
        **_lines(session),
        "view_tokens": view.tokens,
        "chart": _series(session.state.records, calls, view.tokens),
        "saved": _saved(session, view),
        "events": [{"type": e.type, "data": e.to_dict() | {"replayed": True}} for e in events],
    }
