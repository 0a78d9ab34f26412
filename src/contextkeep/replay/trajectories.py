"""Recorded agent conversations from other projects, loaded as neutral messages.

Formats recognised by :func:`load_trajectories`:

- mini-swe-agent `*.traj.json` (`{"messages": [...], "trajectory_format": ...}`): OpenAI
  messages; each assistant message carries the provider's usage in `extra.response.usage`.
- SWE-agent `*.traj` (`{"history": [...], "trajectory": [...]}`): tool results name their
  call in `tool_call_ids`.
- tau-bench results (a list of `{"task_id", "traj": [...]}`): one trajectory per task.
- A plain list of OpenAI messages, as JSON or JSONL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextkeep._errors import MessageFormatError
from contextkeep._formats.openai import from_openai, to_openai
from contextkeep._messages import Message

__all__ = [
    "MINI_SWE_AGENT_TOOLS",
    "RecordedCall",
    "Trajectory",
    "from_swe_agent",
    "load_trajectories",
    "to_swe_agent",
]

# mini-swe-agent's tool-calling mode declares this one function (its schema is not in the logs).
MINI_SWE_AGENT_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Execute a bash command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The bash command to execute"}},
                "required": ["command"],
            },
        },
    }
]


_CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One model call of a recording: the prompt was every message before `index`."""

    index: int
    """Index of the assistant message the call produced."""
    usage: Mapping[str, Any] | None
    """The provider's usage object for that call, when recorded."""


@dataclass(slots=True)
class Trajectory:
    """A recorded conversation."""

    name: str
    """File name, plus the task id when one file holds several runs."""
    format: str
    """`mini-swe-agent`, `swe-agent`, `tau-bench` or `openai`."""
    messages: list[Message]
    """The whole conversation, in order."""
    model: str = ""
    """The model that produced it, when recorded."""
    tools: list[dict[str, Any]] | None = None
    """The tool definitions the agent sent, when known."""
    calls: list[RecordedCall] = field(default_factory=list)
    """Each model call: every assistant message is the answer to one."""
    records: list[dict[str, Any]] = field(default_factory=list)
    """Entries of the message list that are not chat messages (mini-swe-agent's `exit`), verbatim."""

    @property
    def confirmed_calls(self) -> list[RecordedCall]:
        """Calls with the provider's recorded usage."""
        return [c for c in self.calls if c.usage]


def from_swe_agent(history: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Convert a SWE-agent `history` (tool results carry `tool_call_ids`)."""
    converted: list[Mapping[str, Any]] = []
    for d in history:
        ids = d.get("tool_call_ids")
        if d.get("role") == "tool" and isinstance(ids, list) and ids and "tool_call_id" not in d:
            converted.append({**d, "tool_call_id": ids[0]})
        else:
            converted.append(d)
    return from_openai(converted)


def to_swe_agent(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Convert back to SWE-agent history entries (inverse of :func:`from_swe_agent`)."""
    out = to_openai(messages, lossless=True)
    for d in out:
        if "tool_call_ids" in d:
            d.pop("tool_call_id", None)
    return out


def _calls(messages: list[Message], raw: list[Mapping[str, Any]]) -> list[RecordedCall]:
    calls = []
    for i, (m, d) in enumerate(zip(messages, raw, strict=True)):
        if m.role != "assistant":
            continue
        extra = d.get("extra")
        response = extra.get("response") if isinstance(extra, Mapping) else None
        usage = response.get("usage") if isinstance(response, Mapping) else None
        calls.append(RecordedCall(i, usage if isinstance(usage, Mapping) else None))
    return calls


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Load every trajectory a file holds; raises `MessageFormatError` for an unknown shape."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise MessageFormatError("trajectory", f"{p.name} is neither JSON nor JSONL: {exc}") from None
    name = p.name
    if isinstance(data, Mapping) and isinstance(data.get("messages"), list):
        raw = [d for d in data["messages"] if d.get("role") in _CHAT_ROLES]
        records = [dict(d) for d in data["messages"] if d.get("role") not in _CHAT_ROLES]
        messages = from_openai(raw)
        model = str(data.get("info", {}).get("config", {}).get("model", {}).get("model_name", ""))
        tools = MINI_SWE_AGENT_TOOLS if any(m.tool_calls for m in messages) else None
        calls = _calls(messages, raw)
        return [Trajectory(name, "mini-swe-agent", messages, model, tools, calls, records)]
    if isinstance(data, Mapping) and isinstance(data.get("history"), list):
        messages = from_swe_agent(data["history"])
        return [Trajectory(name, "swe-agent", messages, calls=_calls(messages, data["history"]))]
    if isinstance(data, list) and data and all(isinstance(r, Mapping) and "traj" in r for r in data):
        out = []
        for r in data:
            messages = from_openai(r["traj"])
            label = f"{name}#{r.get('task_id')}"
            out.append(Trajectory(label, "tau-bench", messages, "gpt-4o", calls=_calls(messages, r["traj"])))
        return out
    if isinstance(data, list) and all(isinstance(m, Mapping) and "role" in m for m in data):
        messages = from_openai(data)
        return [Trajectory(name, "openai", messages, calls=_calls(messages, data))]
    raise MessageFormatError("trajectory", f"{name}: not a recognised trajectory format")
