"""`contextkeep replay --summary`: the results-table row of docs/replay.md, pooled over the runs."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from contextkeep._cli.replay import SUMMARY_HEADER, replay_command
from support import mini_swe_agent_files, require_shared


@pytest.mark.slow
def test_the_summary_row_pools_the_runs_it_follows() -> None:
    files = mini_swe_agent_files() or [require_shared("trajectories", "mini-swe-agent")]
    paths = sorted(str(p) for p in files)[:2]
    args = [*paths, "--window", "32768", "--reserve", "4096", "--json", "--summary"]
    result = CliRunner().invoke(replay_command, args)
    assert result.exit_code == 0, result.output
    *rows, header, summary = result.output.splitlines()
    runs = [json.loads(line) for line in rows]
    assert len(runs) == 2 and header == SUMMARY_HEADER
    cells = [c.strip() for c in summary.strip("|").split("|")]
    assert len(cells) == header.count("|") - 1
    strategy, over, violations, peak, in_view, *_, breaks, cost, layers = cells
    assert (strategy, over, violations) == ("default", "0", "0")
    assert peak == f"{max(r['peak_view_tokens'] for r in runs):,}"
    most = max(r["prefix_breaks"] for r in runs)
    assert breaks == f"{sum(r['prefix_breaks'] for r in runs)} ({most})"
    lowest = min(r["frr_in_view"] for r in runs if r["frr_in_view"] is not None)
    assert in_view.endswith(f", {lowest:.3f})")
    summed = {k: sum(r["compactions"].get(k, 0) for r in runs) for r in runs for k in r["compactions"]}
    assert layers == ", ".join(f"{k} {v}" for k, v in sorted(summed.items()))
    raw = sum(r["raw_cost_usd"] for r in runs)
    assert abs(float(cost) - sum(r["cost_usd"] for r in runs) / raw) <= 0.0015
