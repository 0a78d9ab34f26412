"""The usage policy on real DeepSeek runs at a 64k window: recorded usage drives it, then a simulated provider."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._events import Event
from contextkeep._manager import ContextManager
from contextkeep._tokens import HFEncoder, counter_for_model
from contextkeep.replay.engine import replay
from contextkeep.replay.trajectories import load_trajectories
from support import DEEPSEEK_TOKENIZER, mini_swe_agent_files, require_shared

# Each case replays a whole DeepSeek run, twice.
pytestmark = pytest.mark.slow

WINDOW, RESERVED, THRESHOLD = 65_536, 8_192, 0.85
USABLE = WINDOW - RESERVED


@pytest.mark.parametrize("path", mini_swe_agent_files() or [None], ids=lambda p: p.name if p else "none")
async def test_recorded_then_simulated_usage_drives_deferred_compression(
    path: Path | None, tmp_path: Path
) -> None:
    path = path or require_shared("trajectories", "mini-swe-agent")
    require_shared("tokenizers", "deepseek_tokenizer.json")
    (trajectory,) = load_trajectories(path)
    encoder = HFEncoder(DEEPSEEK_TOKENIZER)
    cm = ContextManager(
        ModelSpec("deepseek-chat", WINDOW),
        config=ContextConfig(
            reserved_tokens=RESERVED, usage_mode="confirmed_only", compression_threshold_ratio=THRESHOLD
        ),
        workspace=tmp_path / "ws",
        counter_factory=lambda: counter_for_model(trajectory.model, encoder),
    )
    events: list[Event] = []
    cm.events.subscribe(events.append)
    views: list[int] = []
    result = await replay(trajectory, cm, provider_usage=True, on_view=lambda i, v: views.append(v.tokens))

    completed = [e.to_dict() for e in events if e.type == "model.completed"]
    assert len(completed) == len(result.calls)
    compacted_before = False
    for n, call in enumerate(result.calls):
        prompt = completed[n]["input_tokens"]
        if not compacted_before and not call.layers:
            # Until the first compaction the recorded usage drives the policy, and our view is that prompt exactly.
            recorded = trajectory.calls[n].usage
            assert recorded is not None and prompt == recorded["prompt_tokens"] == views[n]
        else:
            assert prompt == views[n]  # the simulated provider counts the compacted view
        compacted_before = compacted_before or bool(call.layers)
        assert prompt <= USABLE
        # A flag raised by call n is consumed by call n+1, and only then does the view change.
        baseline = completed[n]["next_call_baseline_tokens"]
        flagged = baseline / USABLE >= THRESHOLD
        assert completed[n]["compression_required"] == flagged
        assert completed[n]["usage_status"] == "CONFIRMED_BASELINE"
        assert completed[n]["baseline_ratio"] == pytest.approx(baseline / USABLE)
        if n + 1 < len(result.calls):
            assert bool(result.calls[n + 1].layers) == flagged
    reasons = [e.to_dict()["compression_reason"] for e in events if e.type == "context.compression.completed"]
    assert reasons == ["THRESHOLD_REACHED"] * sum(1 for c in result.calls if c.layers)
    invalidated = [e.to_dict()["usage_status"] for e in events if e.type == "context.compression.completed"]
    assert set(invalidated) <= {"BASELINE_INVALIDATED"}
    if max(u["prompt_tokens"] for u in (c.usage for c in trajectory.calls if c.usage)) > THRESHOLD * USABLE:
        assert any(c.layers for c in result.calls)  # this run would have crossed the threshold
