"""Layer 3 in the default pipeline: it runs when dropping lost too much, and keeps the digest's lines."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contextkeep import ContextManager
from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._messages import Message
from contextkeep._summarizers import ExtractiveSummarizer, LLMSummarizer, Summarizer, SummaryRequest
from contextkeep._tokens import counter_for_model
from contextkeep.models.adapter import ModelReply
from support import call, result

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Fix the failing test in src/app.py"}
FILLER = "\n".join(f"noise line {j} with nothing of interest" for j in range(10))


def _long_run(n: int) -> list[dict[str, Any]]:
    """Rounds each naming a helper of its own, which the agent looks up: more than a small digest holds."""
    out: list[dict[str, Any]] = [SYSTEM, TASK]
    for i in range(n):
        out += [
            call(f"c{i}", f"grep -n helper_number_{i} src/app.py"),
            result(f"c{i}", f"{FILLER}\n{100 + i}: def helper_number_{i}(value_{i}):\n{FILLER}"),
        ]
    return out


def _manager(tmp_path: Path, summarizer: Summarizer | None, **config: Any) -> ContextManager:
    # Default layers and thresholds; only the window and the digest are small.
    return ContextManager(
        ModelSpec("test-model", 4000),
        config=ContextConfig(min_keep_tokens=500, **config),
        workspace=tmp_path / "ws",
        tokenizer="heuristic",
        summarizer=summarizer,
    )


async def test_a_long_run_whose_digest_overflows_gets_a_summary_holding_the_digest(tmp_path: Path) -> None:
    cm = _manager(tmp_path, ExtractiveSummarizer(), drop_digest_tokens=200)
    async with cm.session("c") as s:
        await s.add(_long_run(40))
        view = await s.prepare()
        assert "L3" in view.compacted
        (summary,) = [m for m in view.neutral if m.metadata.get("ck_kind") == "summary"]
        # The summary stands for the dropped rounds: no marker (nor digest) beside it.
        assert not [m for m in view.neutral if m.metadata.get("ck_kind") == "dropped"]
        # The digest's command lines, with their outputs' references, survive into the summary verbatim.
        assert "> - grep -n helper_number_" in summary.text
        assert "→ [Full detail available at: sessions/c/tool_result-c" in summary.text


async def test_a_digest_that_holds_everything_needs_no_summary(tmp_path: Path) -> None:
    # Long rounds (the agent's own prose) with nothing but their commands worth keeping: a small digest.
    history = [SYSTEM, TASK]
    for i in range(12):
        history += [{**call(f"c{i}", f"cat part_{i}.txt"), "content": "plain words only " * 80}]
        history.append(result(f"c{i}", "done"))
    cm = _manager(tmp_path, ExtractiveSummarizer(), drop_digest_tokens=2_000)
    async with cm.session("c") as s:
        await s.add(history)
        view = await s.prepare()
        assert "L2" in view.compacted and "L3" not in view.compacted
        (marker,) = [m for m in view.neutral if m.metadata.get("ck_kind") == "dropped"]
        assert "- cat part_0.txt" in marker.text.splitlines()


async def test_without_a_summariser_of_its_own_the_overflowing_digest_stays(tmp_path: Path) -> None:
    # The LLM-free fallback keeps less than the digest: it is not called for this.
    cm = _manager(tmp_path, None, drop_digest_tokens=200)
    async with cm.session("c") as s:
        await s.add(_long_run(40))
        view = await s.prepare()
        assert "L2" in view.compacted and "L3" not in view.compacted
        assert [m for m in view.neutral if m.metadata.get("ck_kind") == "dropped"]


COUNTER = counter_for_model("deepseek-chat", "heuristic")
DIGEST = ("- grep -n helper_number_7 src/app.py → [Full detail available at: sessions/c/r7.txt]",)


async def test_the_extractive_summary_keeps_the_digest_lines() -> None:
    request = SummaryRequest("c", [Message("user", "Fix it")], None, ContextConfig(), COUNTER, digest=DIGEST)
    summary = await ExtractiveSummarizer().summarize(request)
    assert f"> {DIGEST[0]}" in summary.text


class _Model:
    """A model we do not own: answers one summary and records the prompt."""

    def __init__(self) -> None:
        self.prompts: list[list[Message]] = []

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec("fake")

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        self.prompts.append(list(messages))
        answer = {
            "task_overview": "fix",
            "current_state": "",
            "important_discoveries": [],
            "next_steps": [],
            "context_to_preserve": [DIGEST[0]],
        }
        return ModelReply(Message("assistant", json.dumps(answer)))


async def test_the_llm_summariser_is_given_the_digest_and_told_to_keep_it() -> None:
    model = _Model()
    request = SummaryRequest("c", [Message("user", "Fix it")], None, ContextConfig(), COUNTER, digest=DIGEST)
    await LLMSummarizer(model).summarize(request)
    (prompt,) = model.prompts
    system = prompt[0].text
    assert DIGEST[0] in system and "Keep its lines in the summary verbatim" in system
