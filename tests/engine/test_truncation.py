"""Layer 0 (tool-result truncation): a cut result is shorter than the whole one, always."""

from __future__ import annotations

from pathlib import Path

import pytest

import support
from contextkeep._compaction.ingest import truncate_tool_result
from contextkeep._tokens import HeuristicEncoder, OpenAIFraming, PromptCounter

COUNTER = PromptCounter(HeuristicEncoder(), OpenAIFraming())
REFERENCE = "sessions/s/tool_result-c1.txt"


def _text_of(tokens: int) -> str:
    """Varied words, so the head and tail differ and the count grows with the length."""
    words = [f"w{i % 97}" for i in range(tokens * 2)]
    text = " ".join(words)
    while COUNTER.count_text(text) > tokens:
        text = text[: int(len(text) * 0.98)]
    return text


def test_a_result_just_over_the_limit_stays_whole() -> None:
    text = _text_of(110)
    limit = COUNTER.count_text(text) - 5

    assert COUNTER.count_text(text) > limit
    # Head + tail within the limit plus the reminder would not save anything: the result stays.
    assert truncate_tool_result(text, limit, COUNTER, REFERENCE) is None


@pytest.mark.parametrize("tokens", [200, 1_000, 20_000])
def test_a_cut_result_is_shorter_than_the_original(tokens: int) -> None:
    text = _text_of(tokens)
    cut = truncate_tool_result(text, 100, COUNTER, REFERENCE)

    assert cut is not None
    assert COUNTER.count_text(cut) < COUNTER.count_text(text)
    assert REFERENCE in cut


async def test_no_view_shows_a_result_longer_than_it_was(tmp_path: Path) -> None:
    cm = support.manager(tmp_path, window=100_000, tool_result_limit=100)
    async with cm.session("s") as s:
        sizes = [90, 104, 112, 130, 400, 3_000]
        for i, size in enumerate(sizes):
            await s.add([support.call(f"c{i}"), support.result(f"c{i}", _text_of(size))])
        view = await s.prepare()
    originals = {m.tool_call_id: m.text for m in s.transcript if m.role == "tool"}
    shown = [m for m in view.neutral if m.role == "tool"]
    assert len(shown) == len(sizes)
    for m in shown:
        assert COUNTER.count_text(m.text) <= COUNTER.count_text(originals[m.tool_call_id])
    assert any(m.text != originals[m.tool_call_id] for m in shown)  # the long ones were cut
