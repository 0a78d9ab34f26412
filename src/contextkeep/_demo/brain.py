"""The demo's built-in model: a deterministic agent policy served by the fake LLM server.

It reads the request like a model would: the last tool call it made tells it where
it is in its plan, so a retried request gets the same answer, and compaction of
older rounds does not confuse it. When a masked output's reference is in view, it
uses `recall` to read the detail back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from contextkeep.testing import Reply, ToolCallSpec

__all__ = ["AUDIT_TASK", "FOLLOW_UP_TASK", "respond"]

AUDIT_TASK = (
    "Audit the service in this folder: read every module, check the log for errors, and write REPORT.md."
)
FOLLOW_UP_TASK = "Continue: confirm the shipping error's order number and add it to REPORT.md."

_MODULES = ("billing", "inventory", "shipping", "accounts", "reports")
_AUDIT: list[tuple[str, dict[str, Any]]] = [
    ("list_files", {"directory": "."}),
    ("read_file", {"path": "settings.toml"}),
    *[("read_file", {"path": f"{m}.py"}) for m in _MODULES],
    ("count_lines", {"path": "service.log"}),
    ("read_file", {"path": "service.log"}),
    *[("grep", {"pattern": f"def {m}_step_3\\b", "path": f"{m}.py"}) for m in _MODULES],
    ("grep", {"pattern": "ERROR", "path": "service.log"}),
    ("grep", {"pattern": "TODO", "path": "shipping.py"}),
    ("recall", {}),
    *[("grep", {"pattern": f"INFO {m}:.*batch 1[0-9]{{2}} ", "path": "service.log"}) for m in _MODULES],
    *[("grep", {"pattern": f"def {m}_step_1[0-9]\\b", "path": f"{m}.py"}) for m in _MODULES],
    *[("count_lines", {"path": f"{m}.py"}) for m in _MODULES],
    ("write_file", {"path": "REPORT.md"}),
]
_FOLLOW_UP: list[tuple[str, dict[str, Any]]] = [
    ("grep", {"pattern": "QuoteError", "path": "service.log"}),
    ("recall", {}),
    ("write_file", {"path": "REPORT.md"}),
]
_REFERENCE = re.compile(r"\[Full detail available at: ([^\]\s]+)\]")


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content or "")


def respond(body: Mapping[str, Any]) -> Reply:
    """The next step for the conversation in `body` (an OpenAI chat request)."""
    messages = list(body.get("messages", []))
    users = [_text(m) for m in messages if m.get("role") == "user"]
    plan = _FOLLOW_UP if any(FOLLOW_UP_TASK in u for u in users[-1:]) else _AUDIT
    step = _next_step(messages, plan)
    if step >= len(plan):
        return Reply(
            text="Done. REPORT.md lists the modules, the settings and the shipping QuoteError (order 88412)."
        )
    name, args = plan[step]
    if name == "recall":
        refs = [r for m in messages for r in _REFERENCE.findall(_text(m))]
        if not refs:  # nothing masked yet: skip the recall
            return respond({**body, "messages": [*messages, _fake_done(name, args)]})
        args = {"reference": refs[-1], "pattern": "ERROR|TODO|QuoteError|def "}
    if name == "write_file":
        args = {"path": "REPORT.md", "content": _report(messages)}
    return Reply(text=f"Step {step + 1}: {name}.", tool_calls=[ToolCallSpec(name, args)])


def _fake_done(name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    call = {"id": "skipped", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def _next_step(messages: list[Mapping[str, Any]], plan: list[tuple[str, dict[str, Any]]]) -> int:
    """One past the plan step of the newest tool call made after the last user message."""
    for message in reversed(messages):
        if message.get("role") == "user" and not _text(message).startswith(
            ("[contextkeep", "<context_summary>")
        ):
            return 0
        for call in reversed(message.get("tool_calls") or []):
            name = call["function"]["name"]
            args = json.loads(call["function"]["arguments"] or "{}")
            for i in range(len(plan) - 1, -1, -1):
                if plan[i][0] == name and (name in ("recall", "write_file") or plan[i][1] == args):
                    return i + 1
    return 0


def _report(messages: list[Mapping[str, Any]]) -> str:
    seen = sorted({m for msg in messages for m in _MODULES if f"{m}.py" in _text(msg)})
    return (
        "# Audit\n\nModules read: " + ", ".join(seen) + "\n\nFinding: shipping QuoteError for order 88412.\n"
    )
