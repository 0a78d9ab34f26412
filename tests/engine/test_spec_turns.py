"""Turn protection (Agents-Flex `keepRecentTurns`) and the summary circuit breaker under every strategy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import SummaryError
from contextkeep._events import CompressionCompleted, CompressionFailed, Event
from contextkeep._manager import ContextManager
from contextkeep._summarizers import LLMSummarizer
from contextkeep._usage import Usage
from contextkeep.models import OpenAIAdapter
from contextkeep.testing import FakeLLMServer
from support import call, closing, manager, result, rounds

SYSTEM = {"role": "system", "content": "You are a careful agent."}


def turn(n: int, tool_rounds: int, size: int = 400) -> list[dict[str, Any]]:
    """One user turn: a question, then `tool_rounds` tool rounds and a closing answer."""
    body = rounds(tool_rounds, size=size, start=n * 100)
    return [
        {"role": "user", "content": f"question {n}"},
        *body,
        {"role": "assistant", "content": f"answer {n}"},
    ]


def texts(view: Any) -> list[str]:
    return [m.text for m in view.neutral]


def events(cm: ContextManager, kind: str) -> list[Event]:
    seen: list[Event] = []
    cm.events.subscribe(seen.append, kind)
    return seen


async def test_current_turn_is_out_of_reach_of_a_deferred_pass(tmp_path: Path) -> None:
    cm = manager(tmp_path, 6_000, keep_recent_turns=0, min_keep_tokens=0)
    current = [{"role": "user", "content": "question 9"}, *rounds(7, start=900)]
    async with cm.session("c") as s:
        await s.add([SYSTEM, *turn(1, 6), *turn(2, 6), *current])
        # The model asks for one more tool; its confirmed usage crosses the threshold.
        await s.record(call("c999", "cmd 999"), Usage(input_tokens=5_500, output_tokens=20))
        await s.add([result("c999", "HEAD-999 " + "y" * 380 + " TAIL-999")])
        assert s.state.compression_required
        view = await s.prepare()
    assert view.compacted  # the earlier turns were compacted ...
    turn_start = len(s.transcript) - len(current) - 2
    for m in s.transcript[turn_start:]:  # ... and every message of the current turn is there verbatim
        assert m.text in texts(view), m.text[:40]
    assert not s.state.compression_required


async def test_keep_recent_turns_protects_that_many_complete_turns(tmp_path: Path) -> None:
    cm = manager(tmp_path, 4_000, keep_recent_turns=1, min_keep_tokens=0)
    previous, current = turn(3, 6), [{"role": "user", "content": "question 9"}, *rounds(2, start=900)]
    async with cm.session("c") as s:
        await s.add([SYSTEM, *turn(1, 8), *turn(2, 8), *previous, *current])
        view = await s.prepare()
    assert view.compacted
    shown = texts(view)
    assert all(m["content"] in shown for m in [*previous, *current])
    assert "HEAD-100 " + "x" * 380 + " TAIL-100" not in shown  # the oldest turn was compacted


async def test_nothing_to_compress_when_only_the_current_turn_is_left(tmp_path: Path) -> None:
    cm = manager(tmp_path, 1_900, keep_recent_turns=0)
    failed = events(cm, "context.compression.failed")
    async with cm.session("c") as s:
        await s.add([SYSTEM, {"role": "user", "content": "one long task"}, *rounds(11)])
        before = await s.current_view()
        assert before.status.ratio is not None and 0.7 < before.status.ratio < 1.0
        outcome = await s.compress()
        view = await s.prepare()
    assert outcome is not None and outcome.nothing_to_compress and not outcome.changed
    assert view.messages == before.messages and not view.compacted
    assert failed and all(isinstance(e, CompressionFailed) for e in failed)
    assert {e.reason for e in failed if isinstance(e, CompressionFailed)} == {"nothing_to_compress"}


async def test_reactive_layer_may_cut_into_the_current_turn_and_says_so(tmp_path: Path) -> None:
    cm = manager(tmp_path, 1_900, keep_recent_turns=0)
    completed = events(cm, "context.compression.completed")
    async with cm.session("c") as s:
        await s.add([SYSTEM, {"role": "user", "content": "one long task"}, *rounds(16)])
        before = await s.current_view()
        view = await s.prepare()  # over the whole window: L4 ends the pass
    assert "L4" in view.compacted
    assert before.tokens > 1_900 >= view.tokens
    # The system prompt and the last two rounds stay as they were shown.
    assert view.neutral[0] == before.neutral[0] and view.neutral[-4:] == before.neutral[-4:]
    last = completed[-1]
    assert isinstance(last, CompressionCompleted) and last.into_current_turn


async def test_round_mode_keeps_the_current_turns_question_in_view(tmp_path: Path) -> None:
    cm = manager(tmp_path, 3_000, min_keep_tokens=0)  # the default: DB-GPT's rounds
    question = "question 9: why does build 4411 fail?"
    async with cm.session("c") as s:
        await s.add([SYSTEM, *turn(1, 3), {"role": "user", "content": question}, *rounds(14, start=900)])
        view = await s.prepare()
    assert s.state.cut > next(i for i, m in enumerate(s.transcript) if m.text == question)
    assert question in texts(view)


# The summary circuit breaker under the `fail` strategy, through the real SDK and the fake server.
L3_ONLY = {"layers": ("L3",), "trigger_ratio": 0.5, "target_ratio": 0.3, "min_keep_recent_rounds": 2}


def llm_manager(tmp_path: Path, srv: FakeLLMServer, **config: Any) -> ContextManager:
    client = closing(openai.AsyncOpenAI(base_url=srv.base_url, api_key="test", max_retries=0))
    return ContextManager(
        ModelSpec("fake-model", 6_000),
        config=ContextConfig(**{**L3_ONLY, "min_keep_tokens": 0, **config}),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        workspace=tmp_path / "ws",
        tokenizer="heuristic",
        summarizer=LLMSummarizer(OpenAIAdapter("fake-model", client=client)),
    )


def summary_requests(srv: FakeLLMServer) -> int:
    return sum("<<contextkeep:summarize>>" in json.dumps(r.body) for r in srv.requests)


async def test_fail_strategy_counts_failures_opens_the_breaker_and_stops_calling(tmp_path: Path) -> None:
    with FakeLLMServer(context_window=50_000) as srv:
        srv.fail_next_summaries("malformed_json", count=100)
        cm = llm_manager(tmp_path, srv, compression_failure_strategy="fail", max_compact_failures=2)
        failed = events(cm, "context.compression.failed")
        async with cm.session("c") as s:
            await s.add([SYSTEM, {"role": "user", "content": "task"}, *rounds(30, size=300)])
            for expected in (1, 2):
                with pytest.raises(SummaryError):
                    await s.prepare()
                assert s.state.failures == expected
            assert s.state.breaker_open
            asked = summary_requests(srv)
            for _ in range(3):  # open: the typed error each time, the summariser never asked again
                with pytest.raises(SummaryError, match="circuit breaker"):
                    await s.prepare()
            assert summary_requests(srv) == asked
        await cm.close()
        reasons = [(e.reason, e.consecutive_failures) for e in failed if isinstance(e, CompressionFailed)]
        assert reasons[:2] == [("summary_failed", 1), ("summary_failed", 2)]
        assert reasons[2:] == [("breaker_open", 2)] * 3
        assert all(e.to_dict()["error"] for e in failed)

        # The count is persisted: another process sees the open breaker; a reset closes it.
        again = llm_manager(tmp_path, srv, compression_failure_strategy="fail", max_compact_failures=2)
        async with again.session("c") as s2:
            assert s2.state.breaker_open and s2.state.failures == 2
            await s2.reset_breaker()
            with pytest.raises(SummaryError):
                await s2.prepare()
            assert summary_requests(srv) > asked  # asked again (with its one corrective retry)
        await again.close()
