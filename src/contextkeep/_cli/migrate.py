"""`contextkeep migrate`: create or upgrade a store's schema before instances start using it."""

from __future__ import annotations

import asyncio
import sys

import click

from contextkeep._errors import ContextKeepError
from contextkeep.stores import migrate as migrate_store

__all__ = ["migrate"]


@click.command()
@click.option(
    "--store",
    "url",
    required=True,
    metavar="URL",
    help="Store URL: sqlite:///path.db, postgresql://..., mysql://..., redis://... "
    "(table_prefix= / key_prefix= select the tables or keys).",
)
def migrate(url: str) -> None:
    """Create or upgrade the schema of the store at URL and print the schema version reached.

    Run it once per deployment when instances start with `auto_migrate=false`.
    """
    try:
        version = asyncio.run(migrate_store(url))
    except ContextKeepError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(f"schema version {version}")
