"""`create_app`: the FastAPI application behind `contextkeep serve`."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from contextkeep._capabilities import ModelSpec, aresolve_model_spec, resolve_model_spec
from contextkeep._config import ContextConfig
from contextkeep._manager import ContextManager
from contextkeep.server.api import router as api_router
from contextkeep.server.auth import BearerAuth, check_binding
from contextkeep.server.context import ServerContext
from contextkeep.server.hub import EventHub
from contextkeep.server.proxy import Proxy
from contextkeep.server.proxy import router as proxy_router
from contextkeep.server.reader import Reader
from contextkeep.server.sse import router as sse_router
from contextkeep.server.watch import StoreWatcher
from contextkeep.stores import default_store_url

__all__ = ["ServerSettings", "create_app"]

logger = logging.getLogger("contextkeep.server")

DASHBOARD = Path(__file__).parent / "dashboard"


@dataclass(frozen=True)
class ServerSettings:
    """How `contextkeep serve` runs; every field has the CLI option of the same name."""

    host: str = "127.0.0.1"
    """Interface the server binds (a non-loopback host requires `token`)."""
    store: str | None = None
    """Store URL; default: the embedded SQLite store (`default_store_url()`)."""
    workspace: str | None = None
    """Workspace folder; default: `.contextkeep/workspace`."""
    upstream: str | None = None
    """OpenAI-compatible base URL (ending in `/v1`); enables the proxy."""
    upstream_api_key: str | None = None
    """Key sent upstream (default: `$CONTEXTKEEP_UPSTREAM_API_KEY`, else the client's own header)."""
    token: str | None = None
    """Bearer token required by every request when set."""
    model: str = "default"
    """Model key the context is budgeted for (and the usage scope's model key)."""
    window: int | None = None
    """Context window; default: the upstream's `/v1/models`, then the registry, else unknown."""
    config: ContextConfig | None = None
    """Context settings; default: `ContextConfig()`."""
    poll_interval: float = 0.5
    """Seconds between store polls for cross-process events."""
    agent_id: str = "default"
    """Agent id of the usage scope."""
    agent_version: str = "0"
    """Agent version of the usage scope."""
    tokenizer: str | None = None
    """Token counter spec (`tiktoken[:ENCODING]`, `hf:PATH`, `heuristic`); default: the model family's."""


def _manager(settings: ServerSettings) -> ContextManager:
    spec = (
        ModelSpec(settings.model, settings.window)
        if settings.window
        else resolve_model_spec(settings.model, registry=True)
    )
    return ContextManager(
        spec,
        config=settings.config,
        store=settings.store or default_store_url(),
        workspace=settings.workspace,
        tokenizer=settings.tokenizer,
    )


def create_app(settings: ServerSettings | None = None, *, manager: ContextManager | None = None) -> FastAPI:
    """The app: REST under `/api`, events, the proxy at `/v1/chat/completions`, the dashboard at `/`.

    `manager` replaces the one built from `settings` (its store and workspace are then
    used as they are, and not closed at shutdown).
    """
    settings = settings or ServerSettings()
    check_binding(settings.host, settings.token)
    owned = manager is None
    manager = manager or _manager(settings)
    hub = EventHub()
    reader = Reader(manager, settings.agent_id, settings.agent_version)
    upstream_key = settings.upstream_api_key or os.environ.get("CONTEXTKEEP_UPSTREAM_API_KEY")
    the_proxy = (
        Proxy(
            manager,
            settings.upstream,
            api_key=upstream_key,
            consume_authorization=bool(settings.token),
            agent_id=settings.agent_id,
            agent_version=settings.agent_version,
        )
        if settings.upstream
        else None
    )
    watcher = StoreWatcher(
        reader,
        hub,
        interval=settings.poll_interval,
        live=the_proxy.is_live if the_proxy else lambda _: False,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        unsubscribe = manager.events.subscribe(hub.publish_event)
        if settings.upstream and not settings.window and manager.model.context_window is None:
            manager.model = await aresolve_model_spec(settings.model, base_url=settings.upstream)
        logger.info(
            "serving %s (window %s, %s); store polled every %.1f s",
            manager.model.key,
            manager.model.context_window,
            manager.model.source.value,
            settings.poll_interval,
        )
        # Open the store (schema, journal mode) before the watcher and the first request race to.
        await manager.store.list_conversations()
        task = asyncio.create_task(watcher.run(), name="contextkeep-store-watcher")
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            unsubscribe()
            if the_proxy is not None:
                await the_proxy.close()
            if owned:
                await manager.close()

    app = FastAPI(
        title="contextkeep",
        summary="Context-window status, compactions, offloaded content and a context-managing proxy.",
        lifespan=lifespan,
    )
    app.state.ck = ServerContext(manager, hub, reader, the_proxy)
    app.include_router(api_router)
    app.include_router(sse_router)
    app.include_router(proxy_router)
    app.mount("/", StaticFiles(directory=DASHBOARD, html=True), name="dashboard")
    if settings.token:
        app.add_middleware(BearerAuth, token=settings.token)
    return app
