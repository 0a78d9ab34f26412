"""Replaying every shared trajectory at a 32k window: within budget, well paired, nothing lost."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._manager import ContextManager
from contextkeep._tokens import HFEncoder, counter_for_model
from contextkeep.replay.engine import replay
from contextkeep.replay.trajectories import load_trajectories
from support import DEEPSEEK_TOKENIZER, all_trajectory_files, require_shared

# Each case replays a whole shared trajectory.
pytestmark = pytest.mark.slow

FILES: list[Path | None] = [*all_trajectory_files()] or [None]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "none")
async def test_replay_at_32k_stays_in_budget_and_every_reference_reads_back(
    path: Path | None, tmp_path: Path
) -> None:
    path = path or require_shared("trajectories")
    for trajectory in load_trajectories(path):
        if not trajectory.calls:
            continue
        deepseek = trajectory.model.startswith("deepseek") and DEEPSEEK_TOKENIZER.exists()
        tokenizer = HFEncoder(DEEPSEEK_TOKENIZER) if deepseek else "heuristic"
        cm = ContextManager(
            ModelSpec(trajectory.model or "gpt-4o", 32_768),
            config=ContextConfig(reserved_tokens=4_096),
            workspace=tmp_path / "ws",
            counter_factory=functools.partial(counter_for_model, trajectory.model or "gpt-4o", tokenizer),
        )
        result = await replay(trajectory, cm)
        assert result.over_budget_calls == 0
        assert result.invariant_violations == 0
        assert len(result.calls) == len(trajectory.calls)
        for reference in result.references:
            assert await cm.workspace.read(reference), reference
        if result.peak_view_tokens and max(c.raw_tokens for c in result.calls) > 28_672:
            assert result.compactions  # it only fits because compaction ran
