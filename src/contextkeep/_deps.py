"""What a session is given: the collaborators its manager chose, frozen for the session's life.

The manager builds one for each session it opens; the session depends on these alone, never on
the manager (which imports the session, not the other way round).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contextkeep._capabilities import Capacity, ModelSpec
from contextkeep._compaction.builder import SystemPromptHook
from contextkeep._config import ContextConfig
from contextkeep._events import EventBus
from contextkeep._offload.workspace import Workspace
from contextkeep._summarizers.base import Summarizer
from contextkeep._tokens import PromptCounter
from contextkeep.stores.base import Store

__all__ = ["SessionDeps"]


@dataclass(frozen=True, slots=True)
class SessionDeps:
    """The dependencies of a :class:`~contextkeep.Session`."""

    model: ModelSpec
    """The model the views are for (its key scopes the usage baseline)."""
    config: ContextConfig
    """The context configuration."""
    store: Store
    """Where transcripts and states persist."""
    workspace: Workspace
    """Where whatever leaves a view is offloaded."""
    events: EventBus
    """Where events go."""
    hooks: tuple[SystemPromptHook, ...]
    """The `on_system_prompt` hooks, in order."""
    summarizer: Summarizer | None
    """The layer-3 summariser (None: only the fallback)."""
    fallback_summarizer: Summarizer | None
    """The summariser used when the first fails or is absent."""
    new_counter: Callable[[], PromptCounter]
    """Makes the session's token counter (one per session: it remembers that session's last prompt)."""
    capacity: Callable[[ContextConfig], Capacity]
    """The window a call may fill under a configuration (the smallest known figure)."""
    default_max_tokens: int | None
    """The agent's default reply size (the reserved-output chain's third link)."""
