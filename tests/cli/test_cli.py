"""The command line."""

from __future__ import annotations

import json

from click.testing import CliRunner

from contextkeep._cli import main
from support import require_shared


def test_count_json_prints_one_object_per_trajectory_with_the_figures(deepseek_tokenizer) -> None:
    folder = require_shared("trajectories", "mini-swe-agent")
    paths = [str(folder / "django__django-13658.traj.json"), str(folder / "local.traj.json")]
    result = CliRunner().invoke(main, ["count", "--json", "--tokenizer", f"hf:{deepseek_tokenizer}", *paths])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert len(rows) == 1  # the fixture without usage has nothing to compare
    assert rows[0]["calls"] == 38
    assert rows[0]["median_abs_error_pct"] <= 1.0 and rows[0]["max_abs_error_pct"] <= 3.0


def test_count_table_and_calibration() -> None:
    path = require_shared("trajectories", "mini-swe-agent", "django__django-11099.traj.json")
    result = CliRunner().invoke(main, ["count", "--calibrate", str(path)])
    assert result.exit_code == 0, result.output
    assert "counter=pieces/deepseek" in result.output
    summary = result.output.strip().splitlines()[-1]
    assert summary.startswith("  calls=39 ")


def test_count_reports_bad_input_as_an_error(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nothing": 1}')
    result = CliRunner().invoke(main, ["count", str(bad)])
    assert result.exit_code == 2
    assert "not a recognised trajectory format" in result.output
    result = CliRunner().invoke(main, ["count", "--tokenizer", "wat", str(bad)])
    assert result.exit_code == 2
