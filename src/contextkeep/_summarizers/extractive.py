"""The LLM-free summary: facts pulled out of the messages by rules, merged into the previous summary.

It fills the five default fields:

- `task_overview`: the task statement (the first user message), then every later user
  request as `User: …`;
- `current_state`: the last assistant message's text;
- `important_discoveries`: errors seen in tool outputs and user messages (exception lines,
  `FAILED`, `error:`, non-zero exit codes);
- `next_steps`: a user request no assistant message has answered yet;
- `context_to_preserve`: `file: P` (paths the agent named in its calls or text), `path: P`
  (paths only seen in outputs), `$ COMMAND` (commands run) and `id: X` (issue numbers,
  hashes, versions, `def`/`class` names and backticked names the agent or user wrote),
  and `> LINE`: the newest lines of the working-set digest the summary replaces, verbatim
  (a quarter of the bound at most).

Only the agent's and user's own words feed identifiers: tool outputs (whole files, test
logs) would bury them. Same input, same bytes out.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import zip_longest
from typing import Any

from contextkeep._messages import Message, ToolCall
from contextkeep._summarizers._render import Drop, abridge, abridge_tokens, fit_summary
from contextkeep._summarizers.base import DEFAULT_SUMMARY_FIELDS, SummaryRequest, SummaryResult
from contextkeep._tokens import TokenCounter

__all__ = ["ExtractiveSummarizer"]

logger = logging.getLogger("contextkeep.summarizers")

TASK, STATE, ERRORS, NEXT, CONTEXT = DEFAULT_SUMMARY_FIELDS

# Shares of max_summary_tokens one long text may take, and character caps for one-line items.
_TASK_SHARE, _REQUEST_SHARE, _STATE_SHARE, _DIGEST_SHARE = 0.35, 0.10, 0.10, 0.25
_ERROR_CHARS, _COMMAND_CHARS, _ID_CHARS = 240, 160, 80

_EXTENSION = re.compile(
    r"py[ix]?|ipynb|txt|md|rst|json|toml|ya?ml|cfg|ini|conf|(?:ba)?sh|[jt]sx?|rs|go|java|kt|[ch]|cc|[ch]pp|cs"
    r"|rb|php|sql|html|css|[ct]sv|log|xml|lock|patch|diff|traj",
    re.I,
)
# A path ends in `name.ext`; a URL or a dotted module name is not one (checked in _paths).
_PATH = re.compile(
    r"(?<![\w/.~:-])((?:~|\.{1,2})?/?(?:[\w@+-][\w.@+-]*/)*[\w@+-][\w.@+-]*\.([A-Za-z][A-Za-z0-9]{0,7}))"
    r"(:\d+)?(?![\w/])"
)
_EXCEPTION = re.compile(
    r"^\s*((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt))\b(?::\s*(.*))?$"
)
_ERROR_LINE = re.compile(r"\bFAILED\b|\b(?:error|ERROR|fatal|Error):\s")
_EXIT = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>|\bexit (?:code|status)[ :=]+(-?\d+)", re.I)
_IDENTIFIERS = re.compile(
    r"\b(?:def|class)\s+([A-Za-z_]\w*)"  # definitions
    r"|`([^`\n]{2,60})`"  # backticked names
    r"|(?<![\w&])(#\d{2,})\b"  # issue and PR numbers
    r"|\b(v?\d+\.\d+\.\d+(?:[.-]?\w+)?|v\d+\.\d+)\b"  # versions
    r"|\b([0-9a-f]{7,40})\b"  # commit hashes (checked to mix digits and letters)
)
_COMMAND_KEYS = ("command", "cmd", "code", "script", "query", "input")


class ExtractiveSummarizer:
    """Deterministic, LLM-free layer-3 summariser (no network)."""

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Fold `request.messages` into the previous summary's data, within `max_summary_tokens`."""
        return self.summarize_sync(request)

    def summarize_sync(self, request: SummaryRequest) -> SummaryResult:
        """The same, synchronously (it does no I/O)."""
        limit = request.config.max_summary_tokens
        previous = request.previous
        facts = _Facts.from_data(previous.data) if previous and previous.data is not None else _Facts()
        if previous is not None and previous.data is None and previous.text.strip():
            facts.other.append("earlier summary: " + previous.text.strip())
        facts.add_messages(request.messages, request.counter, limit)
        facts.digest.extend(_newest(request.digest, request.counter, int(limit * _DIGEST_SHARE)))
        data, drops = facts.to_data()
        data, text = fit_summary(
            data, request.counter, limit, fields=DEFAULT_SUMMARY_FIELDS, drop_order=drops
        )
        logger.info(
            "extractive summary of %d messages for %s: %d tokens (bound %d)",
            len(request.messages),
            request.conversation_id,
            request.counter.count_text(text),
            limit,
        )
        return SummaryResult(text, data, method="extractive")


def _newest(lines: Sequence[str], counter: TokenCounter, max_tokens: int) -> list[str]:
    """The newest of `lines` that fit in `max_tokens` tokens together, in order."""
    kept: list[str] = []
    for line in reversed(lines):
        max_tokens -= counter.count_text(line) + 1
        if max_tokens < 0:
            break
        kept.append(line)
    return kept[::-1]


def _unique(items: Iterable[str]) -> list[str]:
    """Items without repeats, in order of first appearance."""
    return list(dict.fromkeys(i for i in items if i))


def _one_line(text: str, max_chars: int) -> str:
    return abridge(" ⏎ ".join(line.strip() for line in text.strip().splitlines() if line.strip()), max_chars)


class _Facts:
    """What has been extracted so far, by kind, oldest first."""

    def __init__(self) -> None:
        self.task = ""
        self.requests: list[str] = []
        self.state = ""
        self.errors: list[str] = []
        self.pending = ""
        self.files: list[str] = []
        self.seen: list[str] = []
        self.commands: list[str] = []
        self.ids: list[str] = []
        self.other: list[str] = []
        self.digest: list[str] = []

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> _Facts:
        """Read back the five fields, from this summariser or from an LLM one (strings or lists)."""

        def items(name: str) -> list[str]:
            value = data.get(name)
            values = value if isinstance(value, list | tuple) else [value]
            return [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in values if v]

        facts = cls()
        task = items(TASK)
        facts.task = task[0] if task else ""
        facts.requests = task[1:]
        facts.state = "\n".join(items(STATE))
        facts.errors = items(ERRORS)
        facts.pending = "\n".join(items(NEXT))
        prefixes = {
            "file: ": facts.files,
            "path: ": facts.seen,
            "$ ": facts.commands,
            "id: ": facts.ids,
            "> ": facts.digest,
        }
        for item in items(CONTEXT):
            prefix = next((p for p in prefixes if item.startswith(p)), None)
            if prefix is None:
                facts.other.append(item)  # an LLM summary's own wording
            else:
                prefixes[prefix].append(item.removeprefix(prefix))
        return facts

    def add_messages(self, messages: Sequence[Message], counter: TokenCounter, limit: int) -> None:
        """Extract from `messages`, in order."""
        pending: str | None = None  # the newest user request, until an assistant message follows it
        commands: dict[str, str] = {}  # call id → command, to name what a failing output ran
        for m in messages:
            if m.role == "user" and m.text.strip():
                text = m.text.strip()
                pending = None if not self.task else text
                if not self.task:
                    self.task = abridge_tokens(text, counter, int(limit * _TASK_SHARE), head_share=0.8)
                else:
                    self.requests.append(
                        abridge_tokens("User: " + text, counter, int(limit * _REQUEST_SHARE))
                    )
                self._scan_errors(text)
                self.files.extend(_paths(text, keep_line=True))
                self.ids.extend(_identifiers(text))
            elif m.role == "assistant":
                # A reasoning model may answer with tool calls only: its reasoning is its state then.
                said = m.text.strip() or (m.reasoning or "").strip()
                if said:
                    self.state = abridge_tokens(said, counter, int(limit * _STATE_SHARE))
                pending = None
                self.files.extend(_paths(said, keep_line=True))
                self.ids.extend(_identifiers(said))
                for call in m.tool_calls:
                    commands[call.id] = self._add_call(call)
            elif m.role == "tool":
                self.seen.extend(_paths(m.text, keep_line=False))
                self._scan_errors(m.text, after=commands.get(m.tool_call_id or "", ""))
        if pending is not None:
            self.pending = abridge_tokens(pending, counter, int(limit * _REQUEST_SHARE))

    def _add_call(self, call: ToolCall) -> str:
        command = _command(call)
        self.commands.append(_one_line(command, _COMMAND_CHARS))
        self.files.extend(_paths(command, keep_line=True))
        self.ids.extend(_identifiers(command))
        return self.commands[-1]

    def _scan_errors(self, text: str, after: str = "") -> None:
        found = list(_errors(text))
        if not found and "Traceback (most recent call last)" in text:
            found = [text.strip().splitlines()[-1].strip()]  # the exception line was cut off: keep the end
        code = _exit_code(text)
        if not found and code not in (None, 0):
            found = [f"exit code {code}" + (f" after: {after}" if after else "")]
        self.errors.extend(_one_line(e, _ERROR_CHARS) for e in found)

    def to_data(self) -> tuple[dict[str, Any], list[Drop]]:
        """The five fields, and which items to drop first when they do not fit."""
        touched = _unique(self.files)
        seen = [p for p in _unique(self.seen) if p not in touched]
        digest = _unique(self.digest)
        # Within each kind the oldest items go first; kinds go in this order.
        kinds: list[tuple[str, list[str]]] = [
            ("id: ", _unique(self.ids)),
            ("$ ", _unique(self.commands)),
            ("path: ", seen),
            ("", self.other),
            ("> ", digest),
            ("file: ", touched),
        ]
        context = [prefix + item for prefix, items in kinds for item in items]
        requests = _unique(self.requests)
        errors = _unique(self.errors)
        data: dict[str, Any] = {
            TASK: [self.task, *requests] if self.task else requests,
            STATE: self.state,
            ERRORS: errors,
            NEXT: [self.pending] if self.pending else [],
            CONTEXT: context,
        }
        offset = 1 if self.task else 0
        start = {prefix: sum(len(i) for _, i in kinds[:n]) for n, (prefix, _) in enumerate(kinds)}
        drops: list[Drop] = [(CONTEXT, start[p] + i) for p, items in kinds[:3] for i in range(len(items))]
        drops += [(TASK, offset + i) for i in range(len(requests))]
        drops += [(CONTEXT, start[""] + i) for i in range(len(self.other))]
        drops += [(CONTEXT, start["> "] + i) for i in range(len(digest))]
        # Errors and named files matter alike: drop them in turns, so each keeps its newest.
        error_drops = [(ERRORS, i) for i in range(len(errors))]
        file_drops = [(CONTEXT, start["file: "] + i) for i in range(len(touched))]
        drops += [d for pair in zip_longest(error_drops, file_drops) for d in pair if d is not None]
        return data, drops


def _command(call: ToolCall) -> str:
    """What a tool call ran: its `command` (or similar) argument, else `name(arguments)`."""
    try:
        args = json.loads(call.arguments)
    except ValueError:
        args = None
    if isinstance(args, dict):
        for key in _COMMAND_KEYS:
            if isinstance(args.get(key), str):
                return str(args[key])
    return f"{call.name}({call.arguments})"


def _paths(text: str, *, keep_line: bool) -> Iterator[str]:
    for m in _PATH.finditer(text):
        path, ext, line = m.group(1), m.group(2), m.group(3)
        if "/" not in path and (path.count(".") > 1 or not _EXTENSION.fullmatch(ext)):
            continue  # `np.array`, `django.db.models.sql`: a dotted name, not a file
        path = path.removeprefix("./")
        yield path + line if keep_line and line else path


def _errors(text: str) -> Iterator[str]:
    for line in text.splitlines():
        exc = _EXCEPTION.match(line)
        if exc:
            yield f"{exc.group(1)}: {exc.group(2)}" if exc.group(2) else exc.group(1)
        elif _ERROR_LINE.search(line):
            yield line.strip()


def _exit_code(text: str) -> int | None:
    m = _EXIT.search(text)
    return int(m.group(1) or m.group(2)) if m else None


def _identifiers(text: str) -> Iterator[str]:
    for m in _IDENTIFIERS.finditer(text):
        value = next(g for g in m.groups() if g)
        if m.group(5) and not (re.search(r"\d", value) and re.search(r"[a-f]", value)):
            continue  # a word or a plain number, not a hash
        yield _one_line(value, _ID_CHARS)
