"""`contextkeep replay`: replay recorded trajectories through a strategy and measure what it did.

Token counting: `--tokenizer tiktoken[:ENCODING]`, `hf:PATH` (a Hugging Face
`tokenizer.json`, e.g. `hf:../shared/tokenizers/deepseek_tokenizer.json`) or
`heuristic[:CHARS_PER_TOKEN]`. Without it, DeepSeek trajectories use
`../shared/tokenizers/deepseek_tokenizer.json` (relative to the working directory)
when it exists and the heuristic otherwise; other models get their family's default.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import click

from contextkeep._capabilities import ModelSpec, resolve_model_spec
from contextkeep._errors import ContextKeepError
from contextkeep._manager import ContextManager
from contextkeep._tokens import Encoder, PromptCounter, counter_for_model, encoder_from_spec
from contextkeep._view import View
from contextkeep.replay.engine import ReplayResult, replay
from contextkeep.replay.metrics import (
    CACHE_RULES,
    CacheModel,
    MetricsRecorder,
    Pricing,
    TrajectoryMetrics,
    median,
    per_run_min,
    pooled,
)
from contextkeep.replay.presets import PRESETS, Preset, get_preset
from contextkeep.replay.report import ReportEntry, write_report
from contextkeep.replay.trajectories import Trajectory, load_trajectories

__all__ = ["DEEPSEEK_TOKENIZER", "SUMMARY_HEADER", "Measured", "measure", "replay_command", "summary_row"]

logger = logging.getLogger("contextkeep.cli.replay")

DEEPSEEK_TOKENIZER = Path("../shared/tokenizers/deepseek_tokenizer.json")
"""Where the DeepSeek tokenizer is looked for when `--tokenizer` is not given."""
_FALLBACK_MODEL = "unknown-model"


@dataclass(slots=True)
class Measured:
    """One trajectory replayed and measured."""

    result: ReplayResult
    """The engine's per-call results."""
    metrics: TrajectoryMetrics
    """The figures."""
    entry: ReportEntry
    """The same, with the budget lines, for the HTML report."""


def _encoder(model: str, spec: str | None, cache: dict[str, Encoder]) -> Encoder | None:
    if spec is None and "deepseek" in model.lower() and DEEPSEEK_TOKENIZER.exists():
        spec = f"hf:{DEEPSEEK_TOKENIZER}"
    if spec is None:
        return None  # the model family's default (tiktoken for OpenAI, the heuristic otherwise)
    if spec not in cache:
        cache[spec] = encoder_from_spec(spec, model=model)
    return cache[spec]


def _thresholds(manager: ContextManager) -> dict[str, int | None]:
    config = manager.config
    window = manager.capacity().window
    if window is None:
        return {}
    effective = window - (config.reserved_tokens or manager.model.max_output_tokens or 0)
    trigger = (
        int(config.trigger_ratio * window)
        if config.trigger_ratio is not None
        else int(config.warning_threshold * effective)
    )
    lines = {"trigger": trigger, "target": int(config.target_ratio * effective), "budget": effective}
    return {k: v for k, v in lines.items() if v > 0}


async def measure(
    trajectory: Trajectory,
    preset: Preset,
    *,
    workspace: Path,
    window: int | None = None,
    reserve: int | None = None,
    encoder: Encoder | None = None,
    pricing: Pricing | None = None,
    on_view: Callable[[int, View], None] | None = None,
) -> Measured:
    """Replay one trajectory with `preset` at `window`/`reserve` and measure it."""
    model = trajectory.model or _FALLBACK_MODEL
    spec = ModelSpec(model, window) if window is not None else resolve_model_spec(model)

    def counter() -> PromptCounter:
        return counter_for_model(model, encoder)

    extra: dict[str, Any] = {"reserved_tokens": reserve} if reserve is not None else {}
    manager = ContextManager(
        spec,
        config=preset.config(**extra),
        workspace=workspace,
        counter_factory=counter,
        **preset.manager_options,
    )
    recorder = MetricsRecorder(trajectory, counter, pricing=pricing)

    def observe(index: int, view: View) -> None:
        recorder.observe(index, view)
        if on_view is not None:
            on_view(index, view)

    result = await replay(trajectory, manager, on_view=observe)
    metrics = await recorder.finish(result, manager.workspace)
    return Measured(result, metrics, ReportEntry(metrics, preset.name, _thresholds(manager)))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _dumper(stream: TextIO) -> Callable[[int, View], None]:
    calls = iter(range(sys.maxsize))

    def dump(index: int, view: View) -> None:
        line = {"call": next(calls), "index": index, "messages": view.messages}
        stream.write(json.dumps(line, ensure_ascii=False) + "\n")

    return dump


def _table_row(m: TrajectoryMetrics) -> str:
    def f(x: float | None) -> str:
        return "    –" if x is None else f"{x:5.3f}"

    layers = ",".join(f"{k}:{v}" for k, v in sorted(m.compactions.items())) or "-"
    return (
        f"{m.name[:44]:<44} {len(m.calls):>5} {m.peak_view_tokens:>7} {m.over_budget_calls:>4} "
        f"{m.invariant_violations:>4} {f(m.frr_in_view)} {f(m.frr_recoverable)} "
        f"{f(m.cacheable_prefix_fraction)} {m.prefix_breaks:>6} {f(m.cost_ratio)}  {layers}"
    )


SUMMARY_HEADER = (
    "| strategy | over budget | violations | peak | FRR in view: pooled (median, min) "
    "| whole-token FRR: pooled (min) | context-FRR: pooled (min) | recoverable: pooled (min) "
    "| cacheable prefix | prefix breaks (max per run) | cost / raw (Σ) | compactions |"
)
"""The columns of :func:`summary_row` (the results table of `docs/replay.md`)."""


def summary_row(strategy: str, runs: list[TrajectoryMetrics]) -> str:
    """One Markdown row summarising `runs` of `strategy`: pooled FRRs with their per-run minimum, sums."""

    def f(x: float | None) -> str:
        return "–" if x is None else f"{x:.3f}"

    def frr(metric: str, with_median: bool = False) -> str:
        middle = f"{f(median(runs, metric))}, " if with_median else ""
        return f"{f(pooled(runs, metric))} ({middle}{f(per_run_min(runs, metric))})"

    cached = sum(c.cached_tokens for m in runs for c in m.calls)
    viewed = sum(m.cumulative_view_tokens for m in runs)
    raw = sum(m.raw_cost for m in runs)
    layers: dict[str, int] = {}
    for m in runs:
        for layer, n in m.compactions.items():
            layers[layer] = layers.get(layer, 0) + n
    cells = [
        strategy,
        str(sum(m.over_budget_calls for m in runs)),
        str(sum(m.invariant_violations for m in runs)),
        f"{max((m.peak_view_tokens for m in runs), default=0):,}",
        frr("frr_in_view", with_median=True),
        frr("frr_whole"),
        frr("frr_context"),
        frr("frr_recoverable"),
        f(cached / viewed if viewed else None),
        f"{sum(m.prefix_breaks for m in runs)} ({max((m.prefix_breaks for m in runs), default=0)})",
        f(sum(m.cost for m in runs) / raw if raw else None),
        ", ".join(f"{k} {v}" for k, v in sorted(layers.items())) or "–",
    ]
    return "| " + " | ".join(cells) + " |"


_HEADER = (
    f"{'trajectory':<44} {'calls':>5} {'peak':>7} {'over':>4} {'viol':>4} {'FRRv':>5} {'FRRr':>5} "
    f"{'cache':>5} {'breaks':>6} {'cost':>5}  compactions"
)


async def _run(
    paths: tuple[Path, ...],
    preset: Preset,
    window: int | None,
    reserve: int | None,
    spec: str | None,
    pricing: Pricing,
    dump: Path | None,
    emit: Callable[[Measured], None],
) -> list[Measured]:
    encoders: dict[str, Encoder] = {}
    out = []
    for path in paths:
        for trajectory in load_trajectories(path):
            if not trajectory.calls:
                logger.info("%s: no model calls to replay", trajectory.name)
                continue
            encoder = _encoder(trajectory.model, spec, encoders)
            with tempfile.TemporaryDirectory(prefix="ck-replay-") as ws:
                stream = None
                if dump is not None:
                    dump.mkdir(parents=True, exist_ok=True)
                    stream = (dump / f"{_safe(trajectory.name)}.jsonl").open("w", encoding="utf-8")
                try:
                    measured = await measure(
                        trajectory,
                        preset,
                        workspace=Path(ws),
                        window=window,
                        reserve=reserve,
                        encoder=encoder,
                        pricing=pricing,
                        on_view=_dumper(stream) if stream else None,
                    )
                finally:
                    if stream is not None:
                        stream.close()
            emit(measured)
            out.append(measured)
    return out


@click.command("replay")
@click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--window", type=int, default=None, help="Context window (default: the model's, if known).")
@click.option("--reserve", type=int, default=None, help="Tokens reserved for output.")
@click.option(
    "--strategy",
    default="default",
    type=click.Choice(list(PRESETS)),
    help="Strategy preset.",
    show_default=True,
)
@click.option(
    "--tokenizer",
    "spec",
    default=None,
    help="tiktoken[:ENCODING], hf:PATH (a tokenizer.json) or heuristic[:CHARS_PER_TOKEN]. Default: the "
    "DeepSeek tokenizer at ../shared/tokenizers/ for DeepSeek trajectories if present, else the model "
    "family's default (the heuristic for DeepSeek).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per trajectory.")
@click.option(
    "--dump",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write every call's view (OpenAI messages, one JSON line per call) to DIR/<trajectory>.jsonl.",
)
@click.option(
    "--report", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write an HTML report."
)
@click.option(
    "--price-model", default="deepseek-chat", show_default=True, help="genai-prices model for costs."
)
@click.option(
    "--cache-rule",
    type=click.Choice(["auto", *CACHE_RULES]),
    default="auto",
    show_default=True,
    help="Which prefix the provider serves from cache: openai (128-token blocks from 1,024), deepseek "
    "(64-token units, through the previous reply); auto: the price model's provider's.",
)
@click.option(
    "--summary",
    is_flag=True,
    help="Last, print the runs' Markdown summary row (the columns of docs/replay.md's results table).",
)
def replay_command(
    paths: tuple[Path, ...],
    window: int | None,
    reserve: int | None,
    strategy: str,
    spec: str | None,
    as_json: bool,
    dump: Path | None,
    report: Path | None,
    price_model: str,
    cache_rule: str,
    summary: bool,
) -> None:
    """Replay trajectories call by call through a strategy; print budget, retention, cache and cost."""
    preset = get_preset(strategy)

    def emit(m: Measured) -> None:
        if as_json:
            click.echo(json.dumps({**m.metrics.to_dict(), "strategy": preset.name}))
        else:
            click.echo(_table_row(m.metrics))

    if not as_json:
        click.echo(
            f"strategy={preset.name} window={window} reserve={reserve} price_model={price_model} "
            f"cache_rule={cache_rule}"
        )
        click.echo(_HEADER)
    try:
        cache = None if cache_rule == "auto" else CacheModel.named(cache_rule)
        pricing = Pricing(price_model, cache=cache)
        runs = asyncio.run(_run(paths, preset, window, reserve, spec, pricing, dump, emit))
    except ContextKeepError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if report is not None:
        write_report(report, [m.entry for m in runs], title=f"contextkeep replay: {preset.name}")
        if not as_json:
            click.echo(f"report: {report}")
    if summary:
        click.echo(SUMMARY_HEADER)
        click.echo(summary_row(preset.name, [m.metrics for m in runs]))
