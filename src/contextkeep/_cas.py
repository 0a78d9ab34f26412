"""Compare-and-set for one conversation: the one retry loop behind every load-modify-save.

Each write (a transcript append, a compaction or usage state save) is conditional on what
this instance last loaded. Losing that race is a result, not a failure: the loser reports a
`StoreConflict`, backs off, reloads and tries again on top of the winner's data. A write that
raises is reported as `StoreSaveFailed` and reaches the caller unchanged.
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Awaitable, Callable
from typing import Final, Literal, TypeVar

from contextkeep._emitter import Emitter
from contextkeep._errors import StoreError
from contextkeep._events import StoreConflict
from contextkeep.stores.base import Store, reporting_failure

__all__ = ["ATTEMPTS", "LOST", "CompareAndSet", "Lost"]

ATTEMPTS: Final = 24
"""Attempts before giving up on a document that keeps changing."""

_T = TypeVar("_T")


class Lost(enum.Enum):
    """The type of :data:`LOST`."""

    LOST = "lost"


LOST: Final = Lost.LOST
"""What an attempt returns when its write lost the race (then it is retried)."""


async def _back_off(attempt: int) -> None:
    """Jittered exponential backoff: two instances retrying in lockstep would keep colliding."""
    await asyncio.sleep(random.uniform(0, min(0.002 * 2**attempt, 0.25)))


class CompareAndSet:
    """Writes and retries for one conversation's documents in one store."""

    def __init__(
        self, store: Store, conversation_id: str, reload: Callable[[], Awaitable[None]], events: Emitter
    ) -> None:
        self.store = store
        """Where the documents live."""
        self.conversation_id = conversation_id
        """Whose documents they are."""
        self._reload = reload
        self._events = events

    async def write(self, kind: str, write: Awaitable[bool]) -> bool:
        """Await one conditional write of `kind`; whether it won (a loss is reported as a conflict)."""
        won = await reporting_failure(self.store, kind, write, self._events.aemit)
        if not won:
            self._events.emit(StoreConflict(kind=kind))
        return won

    async def retry(
        self,
        attempt: Callable[[], Awaitable[_T | Literal[Lost.LOST]]],
        failure: str,
        reload: Callable[[], Awaitable[None]] | None = None,
    ) -> _T:
        """Run `attempt` until it does not return :data:`LOST`, reloading in between (`reload`, if given).

        Raises `StoreError` ("could not `failure`") when every attempt lost.
        """
        for n in range(ATTEMPTS):
            result = await attempt()
            if result is not LOST:
                return result
            await _back_off(n)
            await (reload or self._reload)()
        raise StoreError(f"could not {failure}")
