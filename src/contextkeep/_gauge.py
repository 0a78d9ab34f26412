"""How full the window is: the budget of a call, and the status measured against it.

The window is the smallest known capacity (lowered to what the provider stated), the reserved
output follows the chain in :func:`contextkeep._budget.reserve_for`, and the tokens kept beside
the messages (instructions a framework sends apart) are part of every budget. In confirmed-only
mode the status `prepare` shows is the provider's baseline, never a local count.
"""

from __future__ import annotations

from contextkeep._baseline import UsageState
from contextkeep._budget import Budget, reserve_for
from contextkeep._capabilities import Capacity
from contextkeep._config import ContextConfig, UsageMode
from contextkeep._deps import SessionDeps
from contextkeep._events import ContextStatus
from contextkeep._provider_window import ProviderWindow
from contextkeep._tokens import PromptCounter
from contextkeep._usage_policy import UsagePolicy

__all__ = ["Gauge"]


class Gauge:
    """One conversation's budgets and statuses (see `Session.budget` and `Session.prepare`)."""

    def __init__(
        self,
        deps: SessionDeps,
        window: ProviderWindow,
        counter: PromptCounter,
        policy: UsagePolicy,
        conversation_id: str,
    ) -> None:
        self._deps, self._window, self._counter, self._policy = deps, window, counter, policy
        self._conversation_id = conversation_id
        self._last: tuple[ContextConfig, tuple[Capacity, int | None, int], Budget] | None = None

    def budget(self, max_tokens: int | None, config: ContextConfig, outside: int) -> Budget:
        """The budget of a call under `config` (`max_tokens`: the request's; `outside`: kept beside)."""
        deps = self._deps
        capacity = self._window.apply(deps.capacity(config))
        # A pure function of these (the rest is the session's): asked twice per model call (the
        # reply's usage, then the next view), so the last one is kept.
        key = (capacity, max_tokens, outside)
        last = self._last
        if last is not None and last[0] is config and last[1] == key:
            return last[2]
        model_max = deps.model.max_output_tokens
        reserved, clamped_from = reserve_for(
            capacity.window, config.reserved_tokens, max_tokens, deps.default_max_tokens, model_max
        )
        budget = Budget(
            capacity.window, reserved, config.thresholds(), capacity.source, outside, clamped_from
        )
        self._last = (config, key, budget)
        return budget

    def shown(self, tokens: int, budget: Budget, config: ContextConfig, usage: UsageState) -> ContextStatus:
        """The status `prepare` reports (confirmed-only: the provider's baseline, never a local figure)."""
        if config.usage_mode is UsageMode.CONFIRMED_ONLY:
            return self._policy.confirmed_status(usage, budget, self._conversation_id)
        return self.status(tokens, budget)

    def status(self, tokens: int, budget: Budget) -> ContextStatus:
        """The status of a view of `tokens` under `budget`, by this conversation's counter."""
        return ContextStatus.measure(
            tokens,
            budget,
            source=self._counter.source,
            conversation_id=self._conversation_id,
            model_key=self._deps.model.key,
        )
