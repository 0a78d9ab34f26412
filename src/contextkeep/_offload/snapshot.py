"""DB-GPT's action snapshot: the full record of one action, written when it succeeds.

The file (`op_snapshots/step_003_sql_query.json`) holds every field DB-GPT lists, in
its order: `step, action, phase, action_intention, action_reason, thought,
action_input, observation, timestamp, conv_id`. A field the agent did not give is
`null`, never absent, so readers need not guess which keys exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

__all__ = ["ActionSnapshot"]

_ASSIGNED = ("step", "conv_id")
"""Keys the writer fills in (numbering, conversation), never the caller."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class ActionSnapshot:
    """One completed action, as DB-GPT snapshots it (the step and conversation are added on write)."""

    action: str
    """The action (tool) that ran; it also names the file."""
    phase: str | None = None
    """The agent's phase when it ran (the runner's tool calls say `tool`)."""
    action_intention: str | None = None
    """What the agent meant to achieve with it, when the agent said so."""
    action_reason: str | None = None
    """Why the agent chose it, when the agent said so."""
    thought: str | None = None
    """The assistant text of the round that made the call (`None` when the model gave none)."""
    action_input: Any = None
    """The action's input (a tool call's arguments)."""
    observation: str | None = None
    """What the action returned, in full."""
    timestamp: str = field(default_factory=_now)
    """When the action completed: ISO-8601, UTC."""
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Further keys of the caller's own, written after DB-GPT's."""

    @classmethod
    def from_payload(cls, action: str, payload: Mapping[str, Any]) -> ActionSnapshot:
        """A snapshot from a plain mapping: DB-GPT's keys fill the fields, others go to `extra`."""
        names = {f.name for f in fields(cls)} - {"action", "extra"}
        known = {k: v for k, v in payload.items() if k in names}
        extra = {k: v for k, v in payload.items() if k not in names and k not in (*_ASSIGNED, "action")}
        return cls(action, **known, extra=MappingProxyType(extra))

    @classmethod
    def of(cls, snapshot: ActionSnapshot | str, payload: Mapping[str, Any] | None = None) -> ActionSnapshot:
        """`snapshot` itself, or the snapshot of action `snapshot` from `payload`'s fields."""
        return snapshot if isinstance(snapshot, ActionSnapshot) else cls.from_payload(snapshot, payload or {})

    def document(self, conv_id: str) -> dict[str, Any]:
        """The file's content without `step` (the workspace numbers it): every field, `None` included."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        mine = {k: v for k, v in self.extra.items() if k not in own and k not in _ASSIGNED}
        return {**own, "conv_id": conv_id, **mine}
