"""Summarisation requests: how they are recognised and the deterministic summary answered."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from contextkeep.testing._replies import Reply
from contextkeep.testing._tokens import content_text

__all__ = [
    "DEFAULT_SUMMARY_MARKER",
    "SUMMARY_FIELDS",
    "SummaryFailure",
    "SummaryResponder",
    "broken_summary",
    "is_summary_request",
    "summary_reply",
]

DEFAULT_SUMMARY_MARKER = "<<contextkeep:summarize>>"
"""Text whose presence in a system message or the last user message marks a summary request."""

SUMMARY_FIELDS = (
    "task_overview",
    "current_state",
    "important_discoveries",
    "next_steps",
    "context_to_preserve",
)
"""Keys of the structured summary, in order."""

SummaryFailure = Literal["malformed_json", "empty", "timeout", "http_500"]
"""How a summary request fails: unparsable JSON, empty text, a stall longer than the client
waits, or a 500 error."""

SummaryResponder = Callable[[Mapping[str, Any]], Reply]
"""Builds the summary reply from the parsed request body."""

_KNOWN_EXTENSION = re.compile(
    r"\.(?:py|jsx?|tsx?|md|txt|json|toml|ya?ml|cfg|ini|sh|rs|go|java|c|h|cpp|sql|html|css|csv|log)$"
)
_PATH_CANDIDATE = re.compile(r"(?:\.{0,2}/)?(?:[\w.-]+/)*[\w-]+\.[A-Za-z]{1,5}\b")


def _system_texts(body: Mapping[str, Any]) -> list[str]:
    texts = [content_text(body["system"])] if body.get("system") else []
    messages = body.get("messages") or []
    return texts + [
        content_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    ]


def _last_user_text(body: Mapping[str, Any]) -> str:
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    return content_text(users[-1].get("content")) if users else ""


def is_summary_request(body: Mapping[str, Any], marker: str) -> bool:
    """Whether `marker` is in a system message or in the last user message."""
    return any(marker in text for text in [*_system_texts(body), _last_user_text(body)])


def _file_paths(text: str) -> list[str]:
    found = (m.group(0) for m in _PATH_CANDIDATE.finditer(text))
    # A bare "e.g" looks like a file; keep candidates with a directory or a known extension.
    paths = (p for p in found if "/" in p or _KNOWN_EXTENSION.search(p))
    return list(dict.fromkeys(paths))


_NEW_MESSAGES = "\n\nNew messages:\n"
_PREVIOUS_JSON = "Previous summary (JSON):\n"
_ROLE_LINE = re.compile(r"^\[(user|assistant|system|tool result)\b[^\]]*\] ?(.*)")


def _previous_and_new(texts: list[str]) -> tuple[dict[str, Any], str]:
    """The previous summary's data and the new messages, when the request is `LLMSummarizer`'s."""
    prompt = texts[-1] if texts else ""
    if _NEW_MESSAGES not in prompt:
        return {}, "\n".join(texts)
    before, new = prompt.split(_NEW_MESSAGES, 1)
    previous: dict[str, Any] = {}
    if before.startswith(_PREVIOUS_JSON):
        try:
            loaded = json.loads(before[len(_PREVIOUS_JSON) :])
        except ValueError:
            loaded = None
        previous = loaded if isinstance(loaded, dict) else {}
    return previous, new


def summary_reply(body: Mapping[str, Any], marker: str = DEFAULT_SUMMARY_MARKER) -> Reply:
    """A valid JSON summary with the five fields, built only from the request's own text.

    From `LLMSummarizer`'s prompt it keeps the previous summary's task and summarises only the
    new messages; every field holds something (no empty section).
    """
    messages = [m for m in body.get("messages") or [] if m.get("role") not in ("system", "developer")]
    texts = [content_text(m.get("content")).replace(marker, "") for m in messages]
    previous, new = _previous_and_new(texts)
    lines = [line.strip() for line in new.splitlines() if line.strip()]
    tagged = [match for line in lines if (match := _ROLE_LINE.match(line))]
    first_user = next((m.group(2) for m in tagged if m.group(1) == "user" and m.group(2)), None)
    task = previous.get("task_overview") or first_user or (lines[0] if lines else "(no task stated yet)")
    paths = _file_paths(new)
    files = ", ".join(paths) if paths else "none"
    summary = {
        "task_overview": task,
        "current_state": " | ".join(lines[-3:]) if lines else "nothing new since the previous summary",
        "important_discoveries": f"Files: {files}",
        "next_steps": f"Continue from: {lines[-1]}" if lines else "Start the task.",
        "context_to_preserve": f"{len(tagged) or len(messages)} messages summarised; files: {files}",
    }
    return Reply(text=json.dumps(summary, ensure_ascii=False))


def broken_summary(kind: Literal["malformed_json", "empty"]) -> Reply:
    """A summary answer that does not validate."""
    return Reply(text='{"task_overview": "unterminated' if kind == "malformed_json" else "")
