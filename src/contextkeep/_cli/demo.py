"""`contextkeep demo`: the main job, on an embedded default (no API key, no server to start)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import click

from contextkeep._errors import ContextKeepError

__all__ = ["demo"]


@click.command()
@click.option("--resume", is_flag=True, help="Continue the last demo conversation with a follow-up turn.")
@click.option(
    "--store", default=None, help="Store URL (default: the embedded SQLite file under CONTEXTKEEP_HOME)."
)
@click.option("--workspace", type=click.Path(path_type=Path), default=None, help="Offload workspace folder.")
@click.option(
    "--model", default=None, help="Run against a real OpenAI-compatible model instead of the built-in one."
)
@click.option(
    "--base-url", default=None, envvar="OPENAI_BASE_URL", help="Endpoint for --model (or OPENAI_BASE_URL)."
)
@click.option(
    "--window", type=int, default=None, help="Context window of --model, if the endpoint does not say."
)
@click.option(
    "--delay", type=float, default=0.0, help="Seconds to pause after each call (to watch a dashboard)."
)
def demo(
    resume: bool,
    store: str | None,
    workspace: Path | None,
    model: str | None,
    base_url: str | None,
    window: int | None,
    delay: float,
) -> None:
    """Run a long tool-using agent session and show the context window being managed, live."""
    from contextkeep._demo.run import demo_home, run_demo

    home = demo_home()
    model = model or os.environ.get("OPENAI_MODEL")
    mode = f"model {model}" if model else "the built-in model (a 6,144-token window, so every layer fires)"
    click.echo(f"contextkeep demo: auditing a toy service with {mode}\n")
    try:
        result = asyncio.run(
            run_demo(
                home=home,
                store=store,
                workspace=workspace,
                resume=resume,
                model=model,
                base_url=base_url,
                window=window,
                delay=delay,
            )
        )
    except ContextKeepError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    d = result.display
    click.echo("\n" + "─" * 72)
    click.echo(f"answer: {result.output}")
    click.echo(
        f"model calls: {d.calls}   peak view: {d.peak:,} tokens   sent in total: {d.cumulative:,} tokens"
    )
    click.echo(f"tokens removed by compaction: {d.saved:,}   recoveries: {d.recoveries}")
    click.echo("layers: " + (", ".join(f"{k}×{v}" for k, v in sorted(d.layers.items())) or "none"))
    click.echo(f"offloaded files: {len(d.offloaded)} under {result.workspace}")
    click.echo(f"usage now: {d.last_usage}")
    click.echo(f"store: {result.store}   conversation: {result.conversation_id}   ({result.seconds:.1f} s)")
    click.echo("continue it with: contextkeep demo --resume")
