"""The window a provider's overflow error states, kept per conversation once learned.

A window figure from configuration, the endpoint or the registry can be wrong (a
deployment serving `gpt-4o-mini` with `max_model_len` 16384 while the registry says
128,000). The provider's own "maximum context length is 16384 tokens" is the last word:
the first overflow that states a smaller window than the budget's lowers the budget of
every later call of the conversation, with the capacity source `provider_error`. The
figure is saved as the conversation's `capacity` document (scoped by model key), so a
restarted process or another instance budgets for it too.
"""

from __future__ import annotations

import logging
from typing import Final, Literal

from contextkeep._budget import Budget
from contextkeep._capabilities import Capacity, CapacitySource
from contextkeep._cas import LOST, CompareAndSet, Lost
from contextkeep._emitter import Emitter
from contextkeep._errors import ContextOverflowError
from contextkeep._events import CapacityCorrected
from contextkeep.stores.base import Store

__all__ = ["CAPACITY_DOCUMENT", "ProviderWindow"]

logger = logging.getLogger("contextkeep.capabilities")

CAPACITY_DOCUMENT: Final = "capacity"
"""The store document kind a provider-stated window is saved under (scope: the model key)."""


class ProviderWindow:
    """One conversation's provider-stated window for one model (loaded once, then kept current)."""

    def __init__(
        self, store: Store, conversation_id: str, model_key: str, cas: CompareAndSet, events: Emitter
    ) -> None:
        self._store, self._conversation, self._model = store, conversation_id, model_key
        self._cas, self._events = cas, events
        self.window: int | None = None
        """The stated window, once an overflow said it (or the store had it)."""
        self._version = -1  # not loaded yet

    async def load(self) -> None:
        """Read the saved figure, the first time only (it changes only by `learn`)."""
        if self._version < 0:
            await self._reload()

    async def _reload(self) -> None:
        doc = await self._store.load_document(self._conversation, CAPACITY_DOCUMENT, self._model)
        window = doc.data.get("window")
        self.window = window if isinstance(window, int) and window > 0 else None
        self._version = doc.version

    def apply(self, capacity: Capacity) -> Capacity:
        """`capacity`, lowered to the stated window when that is smaller (or the only figure)."""
        if self.window is None or (capacity.window is not None and capacity.window <= self.window):
            return capacity
        return Capacity(self.window, CapacitySource.PROVIDER_ERROR, capacity.window)

    async def learn(self, overflow: ContextOverflowError, budget: Budget) -> bool:
        """Keep the window `overflow` states if it is below `budget`'s; whether the budget changed.

        A `CapacityCorrected` event reports the change.
        """
        stated, current = overflow.limit, budget.context_window
        if not overflow.recoverable or stated is None or (current is not None and stated >= current):
            return False

        async def attempt() -> bool | Literal[Lost.LOST]:
            if self.window is not None and self.window <= stated:
                return False
            save = self._store.save_document(
                self._conversation,
                CAPACITY_DOCUMENT,
                {"window": stated, "source": CapacitySource.PROVIDER_ERROR.value, "message": str(overflow)},
                scope=self._model,
                expected_version=max(self._version, 0),
            )
            if not await self._cas.write(CAPACITY_DOCUMENT, save):
                return LOST
            self.window, self._version = stated, max(self._version, 0) + 1
            return True

        if not await self._cas.retry(attempt, f"save the window of {self._conversation!r}", self._reload):
            return False
        logger.warning(
            "%s: the provider states a %d-token window for %s (budgeted for %s): budgeting for it",
            self._conversation,
            stated,
            self._model,
            current,
        )
        await self._events.aemit(
            CapacityCorrected(
                model_key=self._model,
                context_window=stated,
                previous_window=current,
                previous_source=budget.capacity_source.value,
            )
        )
        return True
