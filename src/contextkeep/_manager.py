"""`ContextManager`: the entry point that opens sessions, with embedded defaults for everything."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from contextkeep._budget import check_reserve
from contextkeep._capabilities import Capacity, ModelSpec, resolve_model_spec
from contextkeep._compaction.builder import SystemPromptHook, default_progress_hook
from contextkeep._config import ContextConfig
from contextkeep._deps import SessionDeps
from contextkeep._errors import ConfigError
from contextkeep._events import EventBus
from contextkeep._metrics import install_metrics
from contextkeep._offload import LocalWorkspace, Offloader, OffloaderWorkspace, Workspace
from contextkeep._session import Session
from contextkeep._summarizers import ExtractiveSummarizer, Summarizer
from contextkeep._sync import SyncSession
from contextkeep._tokens import Encoder, PromptCounter, counter_for_model
from contextkeep.stores import MemoryStore, open_store
from contextkeep.stores.base import Store

__all__ = ["NOT_GIVEN", "ContextManager", "NotGiven", "SyncSession"]

logger = logging.getLogger("contextkeep.manager")


class NotGiven:
    """Sentinel type: an argument left out (as opposed to an explicit `None`)."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN = NotGiven()


def _data_dir() -> Path:
    return Path(os.environ.get("CONTEXTKEEP_HOME", ".contextkeep"))


class ContextManager:
    """Keeps conversations inside a model's context window.

    Every collaborator has an embedded default: the in-memory or SQLite store,
    a local workspace under `.contextkeep/workspace`, the LLM-free summariser, and
    the model family's token counter.

    `workspace` is a folder, a :class:`Workspace`, or any object with AgentScope's two
    offloader methods (`offload_context(session_id, msgs)`, `offload_tool_result(session_id,
    tool_result)`, sync or async): it is wrapped in an :class:`OffloaderWorkspace` over
    the default local workspace, which supplies snapshots, data files and reading back.

    `tokenizer` is a spec (`tiktoken[:ENCODING]`, `hf:PATH`, `heuristic`, `pieces`) or an
    :class:`Encoder`; without it, the model family's counter (see `counter_for_model`). One
    that cannot load or count falls back to an estimate with a logged warning, unless
    `strict_tokenizer=True`, which raises `TokenizerError` instead.
    """

    def __init__(
        self,
        model: ModelSpec | str,
        *,
        config: ContextConfig | None = None,
        store: Store | str | None = None,
        workspace: Workspace | Offloader | str | os.PathLike[str] | None = None,
        summarizer: Summarizer | None = None,
        fallback_summarizer: Summarizer | NotGiven | None = NOT_GIVEN,
        tokenizer: str | Encoder | None = None,
        strict_tokenizer: bool = False,
        counter_factory: Callable[[], PromptCounter] | None = None,
        hooks: Sequence[SystemPromptHook] = (default_progress_hook,),
        default_max_tokens: int | None = None,
        events: EventBus | None = None,
    ) -> None:
        self.model = model if isinstance(model, ModelSpec) else resolve_model_spec(model)
        self.config = config or ContextConfig()
        self.store = _open_store(store)
        self.workspace = _open_workspace(workspace)
        self.summarizer = summarizer
        self.fallback_summarizer = (
            ExtractiveSummarizer() if isinstance(fallback_summarizer, NotGiven) else fallback_summarizer
        )
        if (
            self.config.usage_policy_enabled
            and not self.config.layers
            and not (summarizer or self.fallback_summarizer)
        ):
            raise ConfigError(
                "usage_policy_enabled",
                "the usage policy needs a compaction path that can persist its result: "
                "enable a layer or give a summarizer, or disable the policy",
            )
        self.hooks = tuple(hooks)
        self.default_max_tokens = default_max_tokens
        self.events = events or EventBus()
        install_metrics(self.events)
        self._counter_factory = counter_factory or (
            lambda: counter_for_model(self.model.key, tokenizer, strict=strict_tokenizer)
        )
        self._warned: set[tuple[str, Capacity]] = set()
        """Capacities already warned about (a configured window above the model's)."""
        # A configured reservation that fills the window is refused now, not found at the first call.
        window, reserved = self.capacity().window, self.config.reserved_tokens
        check_reserve(window, reserved, default_max_tokens, self.model.max_output_tokens)

    def capacity(self, config: ContextConfig | None = None) -> Capacity:
        """The window calls may fill: the smallest known of the model's and `config`'s figures.

        A configuration asking for more than the model holds is lowered, with one warning
        per manager and figures (not one per call).
        """
        model = self.model
        capacity = (config or self.config).capacity(model.context_window, model.source)
        if capacity.capped_from is not None and (model.key, capacity) not in self._warned:
            self._warned.add((model.key, capacity))
            logger.warning(
                "the configuration asks for a %d-token context window, more than %s holds: "
                "budgeting for its %d tokens (%s figure)",
                capacity.capped_from,
                model.key,
                capacity.window,
                capacity.source.value,
            )
        return capacity

    def new_counter(self) -> PromptCounter:
        """A fresh token counter (one per session: it remembers that session's last prompt)."""
        return self._counter_factory()

    def new_session(
        self, conversation_id: str, *, agent_id: str = "default", agent_version: str = "0"
    ) -> Session:
        """A session over this manager's collaborators, not loaded yet (`await session.load()` first).

        `session(...)` opens and loads one; this is for callers that keep sessions themselves.
        """
        deps = SessionDeps(
            model=self.model,
            config=self.config,
            store=self.store,
            workspace=self.workspace,
            events=self.events,
            hooks=self.hooks,
            summarizer=self.summarizer,
            fallback_summarizer=self.fallback_summarizer,
            new_counter=self.new_counter,
            capacity=self.capacity,
            default_max_tokens=self.default_max_tokens,
        )
        return Session(deps, conversation_id, agent_id=agent_id, agent_version=agent_version)

    @asynccontextmanager
    async def session(
        self, conversation_id: str, *, agent_id: str = "default", agent_version: str = "0"
    ) -> AsyncIterator[Session]:
        """Open a conversation, loading whatever the store holds for it.

        `agent_id` and `agent_version` (with the model key) scope the usage baseline. On exit the
        offloads it queued are written (`Session.flush`).
        """
        session = self.new_session(conversation_id, agent_id=agent_id, agent_version=agent_version)
        await session.load()
        try:
            yield session
        finally:
            await session.flush()

    async def close(self) -> None:
        """Write what the sessions' background writer still owes, then release the store's connections."""
        await self.workspace.flush_pending()
        await self.store.close()

    @contextmanager
    def sync_session(self, conversation_id: str) -> Iterator[SyncSession]:
        """A blocking session for scripts (runs the async engine on a private event loop)."""
        with asyncio.Runner() as runner:
            session = self.new_session(conversation_id)
            runner.run(session.load())
            try:
                yield SyncSession(session, runner)
            finally:
                runner.run(session.flush())


def _open_workspace(workspace: Workspace | Offloader | str | os.PathLike[str] | None) -> Workspace:
    if isinstance(workspace, Workspace):
        return workspace
    if workspace is None or isinstance(workspace, str | os.PathLike):
        return LocalWorkspace(workspace or _data_dir() / "workspace")
    if isinstance(workspace, Offloader):
        return OffloaderWorkspace(workspace, LocalWorkspace(_data_dir() / "workspace"))
    raise ConfigError(
        "workspace",
        f"a {type(workspace).__name__} is neither a folder, a Workspace nor an Offloader "
        "(offload_context(session_id, msgs) and offload_tool_result(session_id, tool_result))",
    )


def _open_store(store: Store | str | None) -> Store:
    if store is None:
        return MemoryStore()
    return open_store(store) if isinstance(store, str) else store
