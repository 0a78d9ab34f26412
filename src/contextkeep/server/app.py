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

from contextkeep._capabilities import ModelSpec, resolve_model_spec
from contextkeep._config import ContextConfig
from contextkeep._errors import ConfigError
from contextkeep._manager import ContextManager
from contextkeep.server._derived_id import DerivedIds
from contextkeep.server._messages_endpoint import router as messages_router
from contextkeep.server._passthrough import router as passthrough_router
from contextkeep.server._responses import ResponseHistories
from contextkeep.server._responses import router as responses_router
from contextkeep.server.api import router as api_router
from contextkeep.server.auth import BearerAuth, check_binding
from contextkeep.server.bad_input import install_bad_input_handlers
from contextkeep.server.context import ServerContext
from contextkeep.server.guard import RequestGuard
from contextkeep.server.hub import EventHub
from contextkeep.server.kept import KeptConversations
from contextkeep.server.proxy import Proxy
from contextkeep.server.proxy import router as proxy_router
from contextkeep.server.reader import Reader
from contextkeep.server.sse import router as sse_router
from contextkeep.server.watch import StoreWatcher
from contextkeep.stores import default_store_url

__all__ = ["ServerSettings", "create_app"]

logger = logging.getLogger("contextkeep.server")

DASHBOARD = Path(__file__).parent / "dashboard"
UPSTREAM_APIS = ("auto", "chat", "responses", "anthropic")
"""The values of `ServerSettings.upstream_api`."""


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
    """Base URL (…/v1) that enables the proxy: OpenAI-compatible, or Anthropic for `/v1/messages`."""
    upstream_api_key: str | None = None
    """Key sent upstream (default: `$CONTEXTKEEP_UPSTREAM_API_KEY`, else the client's own header)."""
    upstream_api: str = "auto"
    """What the upstream speaks: `chat`, `responses` (and chat), `anthropic`, or `auto` (asked it)."""
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
    allowed_hosts: tuple[str, ...] = ()
    """Names accepted in `Host` and `Origin` besides the bound address (`*`: any); see `server.guard`."""
    max_body_bytes: int = 32 * 1024 * 1024
    """Largest request body accepted (413 beyond)."""
    header_timeout: float = 10.0
    """Seconds a client has to send a request's head (request line and headers) before it is cut off."""
    max_conversations: int = 256
    """Proxied conversations kept in memory with their call history (least recently used evicted)."""
    idle_seconds: float = 900.0
    """A proxied conversation idle this long is evicted from memory (its next request reloads it)."""

    def __post_init__(self) -> None:
        """Refuse limits that would refuse everything, and an unknown upstream API."""
        if self.upstream_api not in UPSTREAM_APIS:
            raise ConfigError("upstream_api", f"must be one of {', '.join(UPSTREAM_APIS)}")
        for name in ("max_body_bytes", "header_timeout", "max_conversations", "idle_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, f"must be positive, got {getattr(self, name)!r}")


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
    """The app: REST under `/api`, events, the proxy under `/v1` (see docs/proxy.md), the dashboard at `/`.

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
            kept=KeptConversations(settings.max_conversations, settings.idle_seconds),
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
    hub.baseline = watcher.baseline

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        unsubscribe = manager.events.subscribe(hub.publish_event)
        if the_proxy is not None:
            await the_proxy.use_upstream_window()
        logger.info(
            "serving %s (window %s, %s); store polled every %.1f s",
            manager.model.key,
            manager.model.context_window,
            manager.model.source.value,
            settings.poll_interval,
        )
        # Open the store (schema, journal mode) before the watcher and the first request race to.
        await manager.store.list_conversations()
        tasks = [asyncio.create_task(watcher.run(), name="contextkeep-store-watcher")]
        if the_proxy is not None:
            tasks.append(asyncio.create_task(_evict_idle(the_proxy.kept), name="contextkeep-evict-idle"))
        try:
            yield
        finally:
            for task in tasks:
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
    app.state.settings = settings  # uvicorn's own limits (`server.connections`) read it
    app.state.derived_ids = DerivedIds()  # names the conversations of requests without an id
    app.state.responses_histories = ResponseHistories()  # for `previous_response_id`
    app.include_router(api_router)
    app.include_router(sse_router)
    app.include_router(proxy_router)
    app.include_router(messages_router)
    app.include_router(responses_router)
    app.include_router(passthrough_router)  # last: its `/v1/{path}` takes what no route above does
    install_bad_input_handlers(app)
    app.mount("/", StaticFiles(directory=DASHBOARD, html=True), name="dashboard")
    if settings.token:
        app.add_middleware(BearerAuth, token=settings.token)
    # Added last, so it runs first: nothing answers a request from elsewhere, not even a 401.
    app.add_middleware(
        RequestGuard,
        bound=settings.host,
        allowed_hosts=settings.allowed_hosts,
        max_body_bytes=settings.max_body_bytes,
    )
    return app


async def _evict_idle(kept: KeptConversations) -> None:
    """Drop conversations idle past their time even when no request comes to trigger it."""
    while True:
        await asyncio.sleep(min(60.0, kept.idle_seconds / 2))
        kept.evict()
