"""Counting ahead: token counts done while the caller is busy, not while it waits.

Counts are cached and pure, so when this work runs changes nothing but speed: after an append
(the caller is running the tools a model asked for) the new messages are counted; after a
prepare (the model call is in flight) the masked previews a later pass may show are counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextkeep._tokens import PromptCounter

__all__ = ["CountAhead"]

logger = logging.getLogger("contextkeep.session")

Tools = Sequence[Mapping[str, Any]] | None


class CountAhead:
    """Schedules one conversation's counting on the running loop, off the hot path."""

    def __init__(
        self, counter: PromptCounter, measure: Callable[[Tools], object], conversation_id: str
    ) -> None:
        self.counter = counter
        """The session's counter."""
        self.measure = measure
        """Builds and counts the current view with the given tools."""
        self.conversation_id = conversation_id
        """Whose counts they are (for the log)."""
        self.appended = 0
        """Appends so far: each scheduled count is for the one it follows."""
        self._counted = 0
        """Appends the view of the last `prepare` included (it counted them already)."""
        self._tools: Tools = None
        self._counting = self._warming = False
        """Whether a count (a warm-up) is scheduled: one at a time does the work of any number."""

    def after_append(self, tools: Tools) -> None:
        """Count what was just added; the next `prepare` then only checks the counts.

        When a `prepare` comes first, the view is not built for it.
        """
        self.appended += 1
        self._tools = tools
        if not self._counting:
            self._counting = True
            asyncio.get_running_loop().call_soon(self._count)

    def after_prepare(self, counted: int) -> None:
        """Count masked previews ahead (when masking is on) while the caller waits for the model.

        `counted`: `appended` when `prepare` began counting its view (later appends still count ahead).
        """
        self._counted = max(self._counted, counted)
        if self.counter.stand_in is not None and not self._warming:
            self._warming = True
            asyncio.get_running_loop().call_soon(self._warm)

    def _count(self) -> None:
        self._counting = False
        # A prepare counted the view since: building it again costs a whole view (the counts are
        # cached, the building is not).
        if self.appended <= self._counted:
            return
        try:
            self.measure(self._tools)
        except Exception:  # the same error reaches the caller from prepare(), which can act on it
            logger.debug("%s: counting ahead failed", self.conversation_id, exc_info=True)

    def _warm(self) -> None:
        self._warming = False
        self.counter.warm()
