"""`contextkeep serve`: the dashboard, the REST/event API and (with --upstream) the proxy."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING

import click

from contextkeep._demo.run import DEMO_AGENT, DEMO_CONFIG, DEMO_MODEL, DEMO_WINDOW, demo_home
from contextkeep._errors import ContextKeepError
from contextkeep.stores import default_store_url

if TYPE_CHECKING:
    from contextkeep.server import ServerSettings

__all__ = ["demo_settings", "serve"]


def demo_settings(settings: ServerSettings) -> ServerSettings:
    """`settings` pointed at what `contextkeep demo` writes: its model, window, config and embedded store."""
    return replace(
        settings,
        store=settings.store or default_store_url(),
        workspace=settings.workspace or str(demo_home() / "workspace"),
        model=DEMO_MODEL,
        window=DEMO_WINDOW,
        config=DEMO_CONFIG,
        tokenizer="heuristic",
        agent_id=DEMO_AGENT,
        agent_version="1",
    )


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option("--port", default=8700, show_default=True, type=click.IntRange(0, 65535), help="Port.")
@click.option("--store", default=None, help="Store URL (default: the embedded SQLite store).")
@click.option("--workspace", default=None, help="Workspace folder for offloaded content.")
@click.option("--upstream", default=None, help="OpenAI-compatible base URL (…/v1) to proxy to.")
@click.option(
    "--upstream-api",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "chat", "responses", "anthropic"]),
    help="What the upstream speaks: chat completions only, also Responses, Anthropic Messages, or ask it.",
)
@click.option(
    "--token",
    default=None,
    envvar="CONTEXTKEEP_TOKEN",
    help="Bearer token required by every request (required off loopback). Env: CONTEXTKEEP_TOKEN.",
)
@click.option("--model", default="default", show_default=True, help="Model key the context is budgeted for.")
@click.option("--window", default=None, type=click.IntRange(1), help="Context window (default: upstream).")
@click.option(
    "--agent-id", default="default", show_default=True, help="Agent id of the usage baselines to show."
)
@click.option("--agent-version", default="0", show_default=True, help="Agent version of those baselines.")
@click.option(
    "--demo", is_flag=True, help="Watch `contextkeep demo` runs (its model, window, settings and store)."
)
@click.option(
    "--allow-host",
    "allowed_hosts",
    multiple=True,
    envvar="CONTEXTKEEP_ALLOWED_HOSTS",
    help="Name accepted in Host and Origin besides the bound address (repeatable; `*`: any). "
    "Env: CONTEXTKEEP_ALLOWED_HOSTS (space-separated).",
)
@click.option(
    "--max-body",
    "max_body_bytes",
    default=32 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1),
    help="Largest request body in bytes (413 beyond).",
)
@click.option(
    "--header-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds a client has to send a request's headers.",
)
@click.option(
    "--max-conversations",
    default=256,
    show_default=True,
    type=click.IntRange(1),
    help="Proxied conversations kept in memory (least recently used evicted; reloaded from the store).",
)
@click.option(
    "--idle-timeout",
    "idle_seconds",
    default=900.0,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds after which an idle proxied conversation is evicted from memory.",
)
def serve(
    host: str,
    port: int,
    store: str | None,
    workspace: str | None,
    upstream: str | None,
    upstream_api: str,
    token: str | None,
    model: str,
    window: int | None,
    agent_id: str,
    agent_version: str,
    demo: bool,
    allowed_hosts: tuple[str, ...],
    max_body_bytes: int,
    header_timeout: float,
    max_conversations: int,
    idle_seconds: float,
) -> None:
    """Serve the dashboard and API; with --upstream, also a context-managing chat-completions proxy."""
    try:
        from contextkeep.server import ServerSettings, create_app
        from contextkeep.server.background import ContextServer
        from contextkeep.server.connections import uvicorn_config
    except ImportError as exc:
        hint = "pip install 'contextkeep[server]'"
        click.echo(f"error: serve needs the server extra: {hint} ({exc})", err=True)
        sys.exit(2)
    settings = ServerSettings(
        host=host,
        store=store,
        workspace=workspace,
        upstream=upstream,
        upstream_api=upstream_api,
        token=token,
        model=model,
        window=window,
        agent_id=agent_id,
        agent_version=agent_version,
        allowed_hosts=allowed_hosts,
        max_body_bytes=max_body_bytes,
        header_timeout=header_timeout,
        max_conversations=max_conversations,
        idle_seconds=idle_seconds,
    )
    if demo:
        settings = demo_settings(settings)
    try:
        app = create_app(settings)
    except ContextKeepError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(f"contextkeep dashboard: http://{host}:{port}/" + ("?token=…" if token else ""))
    config = uvicorn_config(app, host, port, log_level="info", timeout_graceful_shutdown=3)
    ContextServer(config, app).run()  # ends open event streams on Ctrl+C instead of waiting for them
