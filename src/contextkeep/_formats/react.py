"""ReAct text format: `Thought:` / `Action:` / `Action Input:` then `Observation:`.

In ReAct mode the model speaks plain text. An assistant message whose text holds
an `Action:` line becomes a neutral message with one tool call (the thought is its
content); the `Observation:` message that follows becomes that call's tool result.
Call ids are derived from the position (`react-3`), so conversion is
deterministic and `to_react(from_react(x)) == x`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from contextkeep._errors import MessageFormatError
from contextkeep._messages import Message, ToolCall

__all__ = ["from_react", "to_react"]

_FORMAT = "react"
_ACTION = re.compile(
    r"\A(?:Thought:[ ]?(?P<thought>.*?)\n)?"
    r"Action:[ ]?(?P<action>[^\n]*)\nAction Input:[ ]?(?P<input>.*)\Z",
    re.DOTALL,
)
_OBSERVATION = "Observation:"


def to_react(messages: Iterable[Message]) -> list[dict[str, str]]:
    """Render messages as ReAct text messages (`role` + string `content`)."""
    out: list[dict[str, str]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "user", "content": f"{_OBSERVATION} {m.text}"})
        elif m.role == "assistant" and m.tool_calls:
            if len(m.tool_calls) > 1:
                raise MessageFormatError(_FORMAT, "ReAct text carries one action per message")
            call = m.tool_calls[0]
            head = f"Thought: {m.text}\n" if m.content is not None else ""
            out.append(
                {
                    "role": "assistant",
                    "content": f"{head}Action: {call.name}\nAction Input: {call.arguments}",
                }
            )
        else:
            out.append({"role": m.role, "content": m.text})
    return out


def from_react(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Parse ReAct text messages into neutral messages with tool calls and results."""
    out: list[Message] = []
    pending: str | None = None
    for i, d in enumerate(messages):
        role, content = d.get("role"), d.get("content")
        if role not in ("system", "user", "assistant") or not isinstance(content, str):
            raise MessageFormatError(_FORMAT, "expected a system/user/assistant text message", index=i)
        match = _ACTION.match(content) if role == "assistant" else None
        if match:
            pending = f"react-{i}"
            call = ToolCall(pending, match["action"], match["input"])
            out.append(Message("assistant", match["thought"], tool_calls=(call,)))
        elif role == "user" and pending is not None and content.startswith(_OBSERVATION):
            text = content[len(_OBSERVATION) :].removeprefix(" ")
            out.append(Message("tool", text, tool_call_id=pending))
            pending = None
        else:
            out.append(Message(role, content))
    return out
