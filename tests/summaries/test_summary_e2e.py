"""Layer 3 end to end: the LLM summariser through the real openai SDK against the fake LLM server."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import SummaryError
from contextkeep._events import Event
from contextkeep._manager import ContextManager
from contextkeep._summarizers import LLMSummarizer
from contextkeep.models import OpenAIAdapter
from contextkeep.testing import FakeLLMServer, SummaryFailure
from support import closing, rounds

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Find why build 4411 fails in src/build/runner.py"}
# AgentScope-style: summarise whenever the trigger is crossed (no masking or dropping).
L3_ONLY = {
    "layers": ("L3",),
    "trigger_ratio": 0.5,
    "target_ratio": 0.3,
    "min_keep_recent_rounds": 2,
    "min_keep_tokens": 0,
}


def manager(tmp_path: Path, srv: FakeLLMServer, *, timeout: float | None = None, **config) -> ContextManager:
    client = closing(openai.AsyncOpenAI(base_url=srv.base_url, api_key="test", max_retries=0))
    return ContextManager(
        ModelSpec("fake-model", 6_000),
        config=ContextConfig(**{**L3_ONLY, **config}),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        workspace=tmp_path / "ws",
        tokenizer="heuristic",
        summarizer=LLMSummarizer(OpenAIAdapter("fake-model", client=client), timeout=timeout),
    )


def summary_requests(srv: FakeLLMServer) -> list[str]:
    return [
        json.dumps(r.body["messages"])
        for r in srv.requests
        if "<<contextkeep:summarize>>" in json.dumps(r.body)
    ]


async def test_summary_is_made_persisted_restored_and_updated_incrementally(tmp_path: Path) -> None:
    with FakeLLMServer(context_window=50_000) as srv:
        cm = manager(tmp_path, srv)
        async with cm.session("c") as s:
            await s.add([SYSTEM, TASK, *rounds(30, size=300)])
            view = await s.prepare()
        assert view.compacted == ("L3",)
        assert s.state.summary is not None and s.state.summary.method == "llm"
        assert set(s.state.summary.data or {}) >= {"task_overview", "current_state", "next_steps"}
        summary_slot = [m for m in view.neutral if m.metadata.get("ck_kind") == "summary"]
        assert len(summary_slot) == 1 and view.neutral[1].text == TASK["content"]  # after the pinned task
        assert len(summary_requests(srv)) == 1
        await cm.close()

        # A restart: a new manager on the same SQLite file builds the same view without asking again.
        again = manager(tmp_path, srv)
        async with again.session("c") as s2:
            restored = await s2.prepare()
            assert restored.messages == view.messages
            assert len(summary_requests(srv)) == 1
            # More work; the next compaction sends only the new rounds plus the previous summary.
            await s2.add(rounds(30, size=300, start=30))
            await s2.prepare()
        await again.close()
    first, second = summary_requests(srv)
    assert "HEAD-3 " in first and "HEAD-3 " not in second  # old rounds are not sent again
    assert "HEAD-45 " in second
    sent = " ".join(str(m["content"]) for m in json.loads(second))
    assert s.state.summary.data is not None
    overview = str(s.state.summary.data["task_overview"])[:40]
    assert overview and overview in sent  # the previous summary travels with the new rounds
    assert s2.state.summary is not None and s2.state.summary.cursor > s.state.summary.cursor


@pytest.mark.parametrize("kind", ["malformed_json", "empty", "timeout", "http_500"])
async def test_failures_count_open_the_breaker_and_the_strategy_applies(
    tmp_path: Path, kind: SummaryFailure
) -> None:
    with FakeLLMServer(context_window=50_000, timeout_seconds=3) as srv:
        srv.fail_next_summaries(kind, count=100)
        cm = manager(
            tmp_path, srv, timeout=0.5, max_compact_failures=2, compression_failure_strategy="extractive"
        )
        failures: list[Event] = []
        cm.events.subscribe(failures.append, "context.compression.failed")
        async with cm.session("c") as s:
            await s.add([SYSTEM, TASK, *rounds(30, size=300)])
            first = await s.prepare()
            # The failure counts, and the extractive fallback still produced a summary.
            assert s.state.failures == 1 and not s.state.breaker_open
            assert s.state.summary is not None and s.state.summary.method == "extractive"
            assert first.compacted == ("L3",)
            await s.add(rounds(30, size=300, start=30))
            await s.prepare()
            assert s.state.failures == 2 and s.state.breaker_open
            asked = len(summary_requests(srv))
            await s.add(rounds(30, size=300, start=60))
            await s.prepare()
            assert len(summary_requests(srv)) == asked  # an open breaker asks no more
        reasons = [e.to_dict() for e in failures]
        assert [r["consecutive_failures"] for r in reasons] == [1, 2]
        assert reasons[-1]["breaker_open"] is True and all(r["error"] for r in reasons)
        await cm.close()


async def test_strategy_fail_raises_and_use_original_leaves_the_view(tmp_path: Path) -> None:
    with FakeLLMServer(context_window=50_000) as srv:
        srv.fail_next_summaries("malformed_json", count=100)
        failing = manager(tmp_path, srv, compression_failure_strategy="fail")
        async with failing.session("a") as s:
            await s.add([SYSTEM, TASK, *rounds(30, size=300)])
            with pytest.raises(SummaryError):
                await s.prepare()
            assert len(s.transcript) == 62  # nothing lost
        await failing.close()
        original = manager(tmp_path, srv, compression_failure_strategy="use_original")
        async with original.session("b") as s:
            await s.add([SYSTEM, TASK, *rounds(30, size=300)])
            view = await s.prepare()
            assert s.state.summary is None and s.state.failures == 1
            assert len(view.neutral) == 62
        await original.close()
