"""Counting without a tokenizer in a live session: the error against DeepSeek's billed prompt_tokens.

Replays each DeepSeek run of ../shared/trajectories/mini-swe-agent through a real `Session`
(add → prepare → record with the usage the provider returned), with the default counter of a
model family that has no tokenizer at hand: `CalibratedCounter` over `PieceEncoder`, anchored on
each confirmed call. Each prepared view's count is compared with the `prompt_tokens` DeepSeek
billed for that very prompt; the first `--warmup` calls are left out (3: the counter has learned
from three confirmed calls). The window is large enough that nothing is compacted, so the view
is the recorded prompt (checked).

`contextkeep count --calibrate` counts with the same counter and mechanism; the script checks
that it reports the same figures, and shows the uncalibrated characters / 4 heuristic beside them.

    TIKTOKEN_CACHE_DIR=../shared/tokenizers python benchmarks/bench_calibration.py [--warmup N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from contextkeep import ContextConfig, ContextManager, ModelSpec
from contextkeep._tokens import counter_for_model
from contextkeep._view import View
from contextkeep.replay.accuracy import count_accuracy
from contextkeep.replay.engine import replay
from contextkeep.replay.trajectories import Trajectory, load_trajectories

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
RUNS = SHARED / "trajectories" / "mini-swe-agent"


async def live_errors(trajectory: Trajectory, workspace: Path) -> list[float]:
    """|error| % of each call's prepared count against the billed prompt_tokens, in call order."""
    manager = ContextManager(
        ModelSpec(trajectory.model, context_window=10_000_000),
        # No truncation at ingest either: the view must be the prompt DeepSeek counted.
        config=ContextConfig(tool_result_limit=10_000_000, tool_result_limit_max_ratio=None),
        workspace=workspace,
    )
    views: list[tuple[int, View]] = []
    await replay(trajectory, manager, provider_usage=True, on_view=lambda i, v: views.append((i, v)))
    billed = {c.index: c.usage["prompt_tokens"] for c in trajectory.confirmed_calls if c.usage}
    errors = []
    for index, view in views:
        if [m.key for m in view.neutral] != [m.key for m in trajectory.messages[:index]]:
            raise SystemExit(f"{trajectory.name}: the view before message {index} is not the recorded prompt")
        errors.append(abs(view.tokens - billed[index]) / billed[index] * 100)
    return errors


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--warmup", type=int, default=3, help="confirmed calls left out of the figures")
    args = parser.parse_args()
    fixtures = ("github_issue.traj.json", "local.traj.json")  # no provider usage
    files = sorted(p for p in RUNS.glob("*.traj.json") if p.name not in fixtures)
    print(f"{'run':46} {'calls':>5} {'median %':>9} {'worst %':>8}   {'chars/4 median':>14} {'worst':>7}")
    everything: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            (trajectory,) = load_trajectories(path)
            errors = asyncio.run(live_errors(trajectory, Path(tmp) / path.stem))[args.warmup :]
            model = trajectory.model
            cli = count_accuracy(trajectory, counter_for_model(model, calibrate=True), warmup=args.warmup)
            if [abs(c.error_pct) for c in cli.scored] != errors:
                raise SystemExit(
                    f"contextkeep count --calibrate disagrees with the live session on {path.name}"
                )
            plain = count_accuracy(trajectory, counter_for_model(model, calibrate=False), warmup=args.warmup)
            everything += errors
            print(
                f"{path.name:46} {len(errors):5} {statistics.median(errors):9.3f} {max(errors):8.3f}   "
                f"{plain.median_abs_error_pct:14.3f} {plain.max_abs_error_pct:7.3f}"
            )
    print(f"{'all runs':46} {len(everything):5} {statistics.median(everything):9.3f} {max(everything):8.3f}")


if __name__ == "__main__":
    main()
