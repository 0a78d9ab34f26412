"""The `contextkeep` command line: one module per command, registered on one group."""

from __future__ import annotations

import click

__all__ = ["main"]


@click.group()
@click.version_option(package_name="contextkeep")
def main() -> None:
    """Keep long-running LLM agents inside their context window."""


def _register() -> None:
    # Each command lives in its own module; importing them here keeps `main` the one entry point.
    from contextkeep._cli import count, demo, migrate, replay, serve

    main.add_command(count.count)
    main.add_command(demo.demo)
    main.add_command(migrate.migrate)
    main.add_command(replay.replay_command)
    main.add_command(serve.serve)


_register()
