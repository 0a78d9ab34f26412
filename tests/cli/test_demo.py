"""The main job: `contextkeep demo` shows every layer and a recovery, and resumes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextkeep._cli import main


def test_demo_shows_every_layer_a_recovery_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXTKEEP_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "✂ L0 truncated" in out
    assert "near the limit — will compact before the next call" in out
    assert re.search(r"compacted \[[^\]]*L1[^\]]*L2[^\]]*L3[^\]]*\] \(THRESHOLD_REACHED\)", out)
    assert "compacted [L4] (OVERFLOW_RECOVERY)" in out and "✓ recovered" in out
    assert "layers: L0×" in out and "recoveries: 1" in out
    # The thresholds are printed once, as shares of the one budget the indicator's % are of.
    assert out.count("a 5,632-token budget; every % below is of this budget") == 1
    assert out.count("down to 45%") == 1 and re.search(r"\d+,?\d*/5,632 tokens", out)
    # L0 never shows a result longer than it was.
    cuts = re.findall(r"L0 truncated a tool result: ([\d,]+) → ([\d,]+)", out)
    assert cuts and all(int(b.replace(",", "")) < int(a.replace(",", "")) for a, b in cuts)
    conversation = re.search(r"conversation: (demo-\S+)", out)
    assert conversation and (tmp_path / "home" / "contextkeep.db").exists()
    assert (tmp_path / "home" / "demo-project" / "REPORT.md").read_text().startswith("# Audit")

    again = CliRunner().invoke(main, ["demo", "--resume"])
    assert again.exit_code == 0, again.output
    assert f"conversation: {conversation.group(1)}" in again.output
