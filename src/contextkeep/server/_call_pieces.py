"""Streamed chat tool-call deltas placed in the reply they build (for restating them as they come)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CallPiece", "CallPieces"]


@dataclass(frozen=True, slots=True)
class CallPiece:
    """One streamed tool-call delta, placed in the reply."""

    position: int
    """Which call of the reply it belongs to (0 for the first)."""
    opens: bool
    """Whether it is that call's first delta (its id and name come with it)."""
    id: str | None
    """The call's id (on its first delta; None when the upstream sent none)."""
    name: str
    """The function's name (on its first delta)."""
    arguments: str
    """This delta's piece of the arguments."""


class CallPieces:
    """Streamed tool-call deltas told apart as the stream's reply assembly does (an index, or a new id)."""

    def __init__(self) -> None:
        self._by_index: dict[int, tuple[int, str | None]] = {}
        self.count = 0
        """Calls seen so far."""

    def read(self, delta: Mapping[str, Any]) -> CallPiece:
        """Place one entry of a chunk's `delta.tool_calls`."""
        index = delta.get("index")
        index = index if isinstance(index, int) else self.count
        known, id = self._by_index.get(index), delta.get("id")
        opens = known is None or bool(id and known[1] and id != known[1])
        if known is None or opens:
            known = self._by_index[index] = (self.count, id)
            self.count += 1
        function = delta.get("function") or {}
        arguments = function.get("arguments")
        return CallPiece(
            known[0],
            opens,
            known[1],
            str(function.get("name") or ""),
            arguments if isinstance(arguments, str) else "",
        )
