"""`contextkeep count`: local token counts beside the provider's recorded usage."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from contextkeep._errors import ContextKeepError
from contextkeep._tokens import counter_for_model
from contextkeep.replay.accuracy import count_accuracy
from contextkeep.replay.trajectories import load_trajectories

__all__ = ["count"]


@click.command()
@click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--tokenizer",
    "spec",
    default=None,
    help="tiktoken[:ENCODING], hf:PATH (a tokenizer.json), heuristic[:CHARS_PER_TOKEN] or pieces. "
    "Default: tiktoken for OpenAI models; otherwise pieces with --calibrate, the heuristic without.",
)
@click.option(
    "--calibrate",
    is_flag=True,
    help="Count as a live session does: anchored on each confirmed call, the rest scaled by the "
    "ratio learned from confirmed usage.",
)
@click.option(
    "--warmup", default=None, type=int, help="Calls left out of the figures (default 3 with --calibrate)."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per trajectory.")
def count(
    paths: tuple[Path, ...], spec: str | None, calibrate: bool, warmup: int | None, as_json: bool
) -> None:
    """Count each recorded model call's prompt locally, beside the provider's prompt_tokens."""
    skip = warmup if warmup is not None else (3 if calibrate else 0)
    try:
        for path in paths:
            for trajectory in load_trajectories(path):
                if not trajectory.confirmed_calls:
                    if not as_json:
                        click.echo(f"{trajectory.name}: no recorded provider usage, nothing to compare")
                    continue
                # A tokenizer asked for by name is measured, not replaced by an estimate.
                counter = counter_for_model(
                    trajectory.model, spec, calibrate=calibrate, strict=spec is not None
                )
                report = count_accuracy(trajectory, counter, warmup=skip)
                if as_json:
                    click.echo(json.dumps({**report.to_dict(), "model": trajectory.model}))
                    continue
                click.echo(f"{trajectory.name}  model={trajectory.model}  counter={report.counter}")
                click.echo(f"  {'call':>5} {'local':>8} {'provider':>9} {'error %':>8}")
                for c in report.calls:
                    click.echo(f"  {c.call:>5} {c.local:>8} {c.provider:>9} {c.error_pct:>8.2f}")
                click.echo(
                    f"  calls={len(report.scored)} median |error|={report.median_abs_error_pct:.3f}% "
                    f"max |error|={report.max_abs_error_pct:.3f}%"
                )
    except ContextKeepError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
