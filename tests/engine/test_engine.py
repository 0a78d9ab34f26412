"""The engine's layers with exact outputs, hysteresis, recovery and on-demand compaction."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from inline_snapshot import snapshot

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import ContextOverflowError, MalformedHistoryError, OverflowPhase
from contextkeep._events import CompressionCompleted, Event
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._rounds import split_rounds
from contextkeep._summarizers import SummaryRequest, SummaryResult
from contextkeep._tokens import HeuristicEncoder
from support import TickingClock, assert_references_readable, call, manager, recording_manager, result, rounds

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Fix the failing test in src/app.py"}


async def test_l0_truncates_an_over_long_result_and_names_the_offloaded_file(tmp_path: Path) -> None:
    cm = manager(tmp_path, 100_000, tool_result_limit=40)
    events: list[Event] = []
    cm.events.subscribe(events.append, "tool_result.truncated")
    text = "\n".join(f"line {i}: value={i * 7}" for i in range(60))
    async with cm.session("c") as s:
        stored = await s.add([SYSTEM, TASK, call("c1", "cat log"), result("c1", text)])
        view = await s.prepare()
    assert stored[-1].text == text  # the transcript keeps everything
    assert view.neutral[-1].text == snapshot("""\
line 0: value=0
line 1: value=7
line 2: value=14
line 3: value=21
line 4: value=28
line 5: \n\
...
lue=399
line 58: value=406
line 59: value=413
<<<TRUNCATED>>>
<system-reminder>The remaining content has been omitted for limited context. You can refer to the file in 'sessions/c/tool_result-c1.txt' for the truncated content if needed.</system-reminder>\
""")
    assert (tmp_path / "ws/sessions/c/tool_result-c1.txt").read_text() == text
    assert [(e.tool_call_id, e.reference) for e in events] == [("c1", "sessions/c/tool_result-c1.txt")]  # type: ignore[attr-defined]


async def test_l0_limit_is_capped_at_a_share_of_the_window(tmp_path: Path) -> None:
    text = "\n".join(f"line {i}: value={i * 7}" for i in range(400))  # about 2,600 heuristic tokens
    for ratio, window, cut in ((0.05, 32_768, True), (0.05, 128_000, False), (None, 32_768, False)):
        cm = manager(tmp_path / f"{ratio}-{window}", window, tool_result_limit_max_ratio=ratio)
        assert cm.config.result_limit(window) == (3000 if not cut else 1638)
        events: list[Event] = []
        cm.events.subscribe(events.append, "tool_result.truncated")
        async with cm.session("c") as s:
            await s.add([SYSTEM, TASK, call("c1", "cat log"), result("c1", text)])
            view = await s.prepare()
        assert ("<<<TRUNCATED>>>" in view.neutral[-1].text) is cut
        assert [e.tokens_before > e.tokens_after for e in events] == ([True] if cut else [])  # type: ignore[attr-defined]
        assert view.tokens < (1638 + 200 if cut else 3000)
    assert ContextConfig(max_context_tokens=20_000).result_limit(None) == 1000
    assert ContextConfig().result_limit(None) == 3000  # unknown window: no cap


async def test_l1_masks_outputs_older_than_the_age_limit_with_head_tail_and_reference(tmp_path: Path) -> None:
    cm = manager(
        tmp_path,
        1400,
        layers=("L1",),
        max_observation_age_rounds=5,
        truncated_observation_max_chars=60,
        tool_result_limit_max_ratio=None,  # at 5% of this tiny window, L0 would cut the newest outputs too
        mask_min_saving_tokens=0,  # these outputs are small: masking them pays too little by default
    )
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(8, size=400)])
        view = await s.prepare()
    assert view.compacted == ("L1",)
    tools = [m for m in view.neutral if m.role == "tool"]
    assert tools[0].text == snapshot("""\
HEAD-0 xxxxxxxxxxxxxxxxxxxxxx … xxxxxxxxxxxxxxxxxxxxx TAIL-0
[Full detail available at: sessions/c/tool_result-c0.txt]\
""")
    masked = [m.tool_call_id for m in tools if "Full detail" in m.text]
    assert masked == ["c0", "c1", "c2"]  # 8 rounds of tools, the newest 5 kept
    assert [m.text for m in tools[3:]] == [m.text for m in s.transcript if m.role == "tool"][3:]
    assert await assert_references_readable(cm.workspace, view.neutral) == 3
    assert (tmp_path / "ws/sessions/c/tool_result-c0.txt").read_text().endswith("TAIL-0")


async def test_l2_drops_whole_rounds_keeps_the_task_and_leaves_a_marker(tmp_path: Path) -> None:
    cm = manager(
        tmp_path,
        3000,
        min_keep_recent_rounds=3,
        min_keep_tokens=500,
        max_observation_age_rounds=5,
        mask_min_saving_tokens=0,
        drop_digest_tokens=0,  # the bare marker (the digest: tests/engine/test_digest.py)
    )
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(30, size=300)])
        view = await s.prepare()
    assert view.compacted == ("L1", "L2")
    roles = [m.role for m in view.neutral[:4]]
    assert roles == ["system", "user", "user", "assistant"]
    assert view.neutral[1].text == TASK["content"]
    marker = view.neutral[2].text
    assert marker.startswith("[contextkeep: ") and "were removed from this view" in marker
    assert marker == snapshot(
        "[contextkeep: 24 earlier round(s), messages m000002 to m000049, were removed from this view to save "
        "context. [Full detail available at: sessions/c/context.jsonl#m000002..m000049]]"
    )
    assert view.neutral[3].tool_calls[0].id == "c24"  # the first kept round follows the dropped ones
    dropped = await cm.workspace.read("sessions/c/context.jsonl#m000002..m000049")
    assert [json.loads(line)["id"] for line in dropped.splitlines()] == [f"m{i:06d}" for i in range(2, 50)]
    # The newest rounds are verbatim and the view is well paired.
    assert [m.text for m in view.neutral[-6:]] == [m.text for m in s.transcript[-6:]]
    split_rounds(view.neutral)
    target = s.budget().tokens_at(cm.config.target_ratio)
    assert target is not None and view.tokens <= target


async def test_task_progress_reaches_the_system_prompt_only_when_the_view_changes_anyway(
    tmp_path: Path,
) -> None:
    cm = manager(tmp_path, 1500, min_keep_tokens=0)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(2)])
        ref = await s.snapshot(
            "sql_query", {"action": "sql_query", "observation": "3 rows"}, summary="3 rows"
        )
        first = await s.prepare()
        assert first.neutral[0].text == SYSTEM["content"]  # no compaction yet: the prefix stays cached
        await s.add(rounds(10, start=2))
        later = await s.prepare()
    assert later.compacted
    assert later.neutral[0].text == snapshot("""\
You are a careful agent.
## Task progress (completed steps)
- step 1 sql_query: 3 rows [Full detail available at: sessions/c/op_snapshots/step_001_sql_query.json]\
""")
    assert ref == "sessions/c/op_snapshots/step_001_sql_query.json"


async def test_hysteresis_the_prefix_only_changes_when_compaction_runs(tmp_path: Path) -> None:
    cm = manager(tmp_path, 8000, min_keep_tokens=1000)
    breaks = compactions = 0
    previous: list[Message] = []
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK])
        for i in range(150):
            await s.add(rounds(1, size=300, start=i))
            view = await s.prepare()
            prefix_kept = view.neutral[: len(previous)] == previous
            breaks += not prefix_kept
            compactions += bool(view.compacted)
            previous = view.neutral
            effective = s.budget().effective
            assert effective is not None and view.tokens <= effective
    assert breaks == compactions
    assert 3 <= compactions <= 150 // 8  # each pass reclaims enough for many calls


async def test_compress_is_a_noop_below_the_trigger_and_honours_overrides(tmp_path: Path) -> None:
    cm = manager(tmp_path, 20_000, min_keep_tokens=0)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(10)])
        assert await s.compress() is None
        outcome = await s.compress(warning_threshold=0.05, target_ratio=0.04, error_threshold=0.9)
        assert outcome is not None and outcome.changed
        assert s.state.records and s.state.records[-1].reason == "MANUAL"
        assert s.config.warning_threshold == 0.70  # the override was for that call only


async def test_a_completed_compaction_reports_where_its_time_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = TickingClock()
    monkeypatch.setattr(time, "perf_counter", clock)

    class SlowSummarizer:
        async def summarize(self, request: SummaryRequest) -> SummaryResult:
            clock.advance(0.2)
            return SummaryResult("what happened so far")

    cm = ContextManager(
        ModelSpec("test-model", 20_000),
        workspace=tmp_path / "ws",
        tokenizer="heuristic",
        summarizer=SlowSummarizer(),
    )
    completed: list[Event] = []
    cm.events.subscribe(completed.append, "context.compression.completed")
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(30)])
        outcome = await s.compress(
            warning_threshold=0.005,
            error_threshold=0.01,
            target_ratio=0.004,
            min_keep_tokens=0,
            mask_min_saving_tokens=0,
        )
    assert outcome is not None and [x.compact_layer for x in outcome.statuses] == ["L1", "L2", "L3"]
    (event,) = completed
    assert isinstance(event, CompressionCompleted)
    assert event.summary_ms >= 200  # the summariser's wait, kept out of the layers' own time
    assert 0 < event.layers_ms < event.summary_ms
    assert event.offload_ms > 0  # dropped and summarised rounds were written before the state
    assert event.layers_ms == pytest.approx(outcome.seconds * 1e3)


async def test_masked_previews_are_counted_while_the_model_call_is_in_flight(tmp_path: Path) -> None:
    cm, encoded = recording_manager(tmp_path)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(12)])
        await s.prepare()
        assert not any("[Full detail available at:" in t for t in encoded)  # not before the call
        await asyncio.sleep(0)  # the caller awaits the model: the loop runs the warm-up
        previews = [t for t in encoded if "[Full detail available at:" in t]
        assert len(previews) == 12
        encoded.clear()
        outcome = await s.compress(
            warning_threshold=0.01, target_ratio=0.005, layers=("L1",), mask_min_saving_tokens=0
        )
    assert outcome is not None and [x.compact_layer for x in outcome.statuses] == ["L1"]
    assert not any("[Full detail available at:" in t for t in encoded)  # the pass found them counted


async def test_previews_keeping_the_lines_the_agent_used_are_counted_ahead_too(tmp_path: Path) -> None:
    cm, encoded = recording_manager(tmp_path)

    def output(i: int) -> str:
        filler = [f"filler line {k} " + "x" * 60 for k in range(40)]
        return "\n".join(
            [f"HEAD-{i}", *filler[:20], f"error in src/module_{i}.py line 17", *filler[20:], f"TAIL-{i}"]
        )

    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK])
        for i in range(12):  # call by call: a preview's used lines are known once the next calls exist
            command = f"cat src/module_{i - 1}.py" if i else "ls"
            await s.add([call(f"c{i}", command), result(f"c{i}", output(i))])
            await s.prepare()
            await asyncio.sleep(0)  # the model call: the previews settled since are counted meanwhile
        encoded.clear()
        outcome = await s.compress(
            warning_threshold=0.01, target_ratio=0.005, layers=("L1",), mask_min_saving_tokens=0
        )
    assert outcome is not None and [x.compact_layer for x in outcome.statuses] == ["L1"]
    previews = [m.text for m in outcome.view if "[Full detail available at:" in m.text]
    assert len(previews) == 7 and all(f"error in src/module_{i}.py" in t for i, t in enumerate(previews))
    assert not any("[Full detail available at:" in t for t in encoded)  # the pass found them counted


async def test_the_models_response_is_counted_while_its_tools_run(tmp_path: Path) -> None:
    cm, encoded = recording_manager(tmp_path)
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(3)])
        await s.prepare(tools=tools)
        await asyncio.sleep(0)
        await s.add(call("c9", "make test"))
        assert not any("make test" in t for t in encoded)  # add() itself does not wait for counting
        await asyncio.sleep(0)  # the caller runs the tool: the loop counts the response meanwhile
        assert sum("make test" in t for t in encoded) == 1
        await s.add(result("c9", "all 12 tests passed"))
        encoded.clear()
        view = await s.prepare(tools=tools)
    assert encoded == [next(t for t in encoded if "all 12 tests passed" in t)]  # only the new result
    fresh, _ = recording_manager(tmp_path / "fresh")
    async with fresh.session("c") as s:
        await s.add(view.messages)
        assert (await s.prepare(tools=tools)).tokens == view.tokens  # what was counted ahead is exact


async def test_an_over_long_result_is_encoded_once_at_ingest(tmp_path: Path) -> None:
    cm, encoded = recording_manager(tmp_path)
    events: list[Event] = []
    cm.events.subscribe(events.append, "tool_result.truncated")
    huge = "log line with details\n" * 2_000
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, call("c1"), result("c1", huge)])
    assert [e.tokens_before for e in events] == [HeuristicEncoder().count(huge)]  # type: ignore[attr-defined]
    assert encoded.count(huge) == 1  # layer 0 and its event share one count


async def test_recover_compacts_by_at_least_the_reported_gap(tmp_path: Path) -> None:
    cm = manager(tmp_path, 100_000)
    events: list[str] = []
    cm.events.subscribe(lambda e: events.append(e.type))
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(20)])
        before = await s.prepare()
        error = ContextOverflowError(
            "too long", phase=OverflowPhase.INPUT_CONTEXT, limit=1500, requested=before.tokens
        )
        after = await s.recover(error)
    assert after.tokens <= 1500 - cm.config.recovery_margin_tokens
    assert after.compacted and set(after.compacted) <= {"L4"}
    split_rounds(after.neutral)
    assert "context.compression.completed" in events
    assert s.state.records[-1].reason == "OVERFLOW_RECOVERY"


@pytest.mark.parametrize("phase", [OverflowPhase.OUTPUT, OverflowPhase.UNKNOWN])
async def test_recover_refuses_output_and_unknown_overflows(tmp_path: Path, phase: OverflowPhase) -> None:
    cm = manager(tmp_path, 100_000)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(3)])
        error = ContextOverflowError("x", phase=phase)
        with pytest.raises(ContextOverflowError):
            await s.recover(error)
        with pytest.raises(ValueError, match="plain"):
            await s.recover(ValueError("plain"))


async def test_recover_with_nothing_to_compact_raises_the_original(tmp_path: Path) -> None:
    cm = manager(tmp_path, 100_000)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK])
        error = ContextOverflowError("x", phase=OverflowPhase.INPUT_CONTEXT, limit=10, requested=20)
        with pytest.raises(ContextOverflowError) as info:
            await s.recover(error)
        assert info.value is error


async def test_bad_input_is_rejected_and_nothing_is_lost(tmp_path: Path) -> None:
    cm = manager(tmp_path, 100_000)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(2)])
        with pytest.raises(MalformedHistoryError, match="orphan_result"):
            await s.add([call("c9"), result("c9", "ok"), result("zz", "orphan")])
        assert len(s.transcript) == 6
        assert len(await cm.store.load_messages("c")) == 6
        await s.add(call("c10"))
        with pytest.raises(MalformedHistoryError, match="missing_result"):
            await s.prepare()  # a model call would be rejected: the call has no result yet


async def test_a_second_manager_on_the_same_store_builds_the_identical_view(tmp_path: Path) -> None:
    cm = manager(tmp_path, 5000, min_keep_tokens=0)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(30)])
        first = await s.prepare()
    other = manager(tmp_path, 5000, min_keep_tokens=0)
    other.store = cm.store
    async with other.session("c") as again:
        second = await again.prepare()
    assert first.compacted and not second.compacted
    assert second.messages == first.messages


async def test_a_reused_call_id_gets_its_own_offload_file(tmp_path: Path) -> None:
    cm = manager(tmp_path, 100_000)
    async with cm.session("c") as s:
        stored = await s.add(
            [SYSTEM, TASK, call("same"), result("same", "A" * 500), call("same"), result("same", "B" * 500)]
        )
    refs = [m.metadata["ck_ref"] for m in stored if m.role == "tool"]
    assert refs == ["sessions/c/tool_result-same.txt", "sessions/c/tool_result-same.m000005.txt"]
    assert [await cm.workspace.read(r) for r in refs] == ["A" * 500, "B" * 500]
