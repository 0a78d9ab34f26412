"""The `recall` tool: read back, or grep, whatever compaction moved out of the view."""

from __future__ import annotations

import re

from contextkeep._agent.tools import Tool, ToolError
from contextkeep._errors import WorkspaceError
from contextkeep._offload.workspace import Workspace

__all__ = ["recall_tool"]

_PAGE = 4_000


def recall_tool(workspace: Workspace, conversation_id: str) -> Tool:
    """A tool confined to one conversation's offloaded content (and shared data files)."""

    async def recall(reference: str, pattern: str | None = None, offset: int = 0, limit: int = _PAGE) -> str:
        """Read content that was removed from your context, by the reference shown where it was.

        Give `reference` exactly as shown (e.g. after "Full detail available at:"). With `pattern`
        (a regular expression), only matching lines are returned, with line numbers. Long
        content comes in pages: pass `offset` (characters, or lines with a pattern) for the next.
        """
        try:
            own = await workspace.resolve(conversation_id, reference)
            if own is None:
                raise ToolError(f"{reference!r} is not a reference of this conversation")
            text = await workspace.read(own)
        except (WorkspaceError, ValueError) as exc:
            raise ToolError(str(exc)) from None
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
