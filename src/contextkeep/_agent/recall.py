"""The `recall` tool: read back, or grep, whatever compaction moved out of the view."""

from __future__ import annotations

import json
import re

from contextkeep._agent.tools import Tool, ToolError
from contextkeep._compaction._digest import command_text
from contextkeep._errors import WorkspaceError
from contextkeep._messages import message_from_dict
from contextkeep._offload.workspace import Workspace

__all__ = ["recall_tool"]

_PAGE = 4_000


def recall_tool(workspace: Workspace, conversation_id: str) -> Tool:
    """A tool confined to one conversation's offloaded content (and shared data files)."""

    async def recall(
        reference: str,
        pattern: str | None = None,
        offset: int = 0,
        limit: int = _PAGE,
        command: str | None = None,
    ) -> str:
        """Read content that was removed from your context, by the reference shown where it was.

        Give `reference` exactly as shown (e.g. after "Full detail available at:"). With `pattern`
        (a regular expression), only matching lines are returned, with line numbers. Long
        content comes in pages: pass `offset` (characters, or lines with a pattern) for the next.
        With `command` (part of a command you ran) and the reference of removed rounds, only the
        output of the last of them that ran such a command is read.
        """
        try:
            text = await workspace.read(await workspace.resolve(conversation_id, reference))
        except (WorkspaceError, ValueError) as exc:
            raise ToolError(str(exc)) from None
        if command is not None:
            text = _output_of(text, command, reference)
        limit = max(1, min(limit, _PAGE * 4))
        if pattern is None:
            page = text[offset : offset + limit]
            rest = len(text) - offset - len(page)
            return page + (
                f"\n[... {rest} more characters: call again with offset={offset + len(page)}]"
                if rest > 0
                else ""
            )
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"invalid pattern: {exc}") from None
        hits = [f"{n}: {line}" for n, line in enumerate(text.splitlines(), 1) if regex.search(line)]
        shown: list[str] = []
        size = 0
        for line in hits[offset:]:
            if size + len(line) > limit and shown:
                break
            shown.append(line)
            size += len(line) + 1
        more = len(hits) - offset - len(shown)
        tail = (
            f"\n[... {more} more matching lines: call again with offset={offset + len(shown)}]"
            if more > 0
            else ""
        )
        return ("\n".join(shown) or "no line matches") + tail

    return Tool.from_function(recall)


def _output_of(span: str, command: str, reference: str) -> str:
    """The output of the last call in an offloaded span (JSON lines) whose command contains `command`."""
    try:
        messages = [message_from_dict(json.loads(line)) for line in span.splitlines() if line.strip()]
    except (ValueError, KeyError, TypeError):
        raise ToolError(f"{reference} holds no messages: give `command` only with removed rounds") from None
    outputs = {m.tool_call_id: m.text for m in messages if m.role == "tool" and m.tool_call_id}
    for m in reversed(messages):
        for c in m.tool_calls:
            if command in command_text(c) and c.id in outputs:
                return outputs[c.id]
    raise ToolError(f"no command containing {command!r} in {reference}")
