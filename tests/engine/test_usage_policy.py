"""Provider-confirmed usage: every rule of the usage policy, and its events."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextkeep._baseline import UsageState, UsageStatus, figures, observe_usage, ui_text
from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import ConfigError
from contextkeep._events import Event
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._usage import Usage, UsageSource
from contextkeep.models.adapter import ModelReply
from support import call, manager, result, rounds

SYSTEM = {"role": "system", "content": "sys"}
TASK = {"role": "user", "content": "task"}


@pytest.mark.parametrize(
    ("usage", "before", "status", "baseline"),
    [
        (Usage(total_tokens=900), UsageStatus.NO_CONFIRMED_USAGE, UsageStatus.CONFIRMED_BASELINE, 900),
        (
            Usage(input_tokens=800, output_tokens=100),
            UsageStatus.NO_CONFIRMED_USAGE,
            UsageStatus.CONFIRMED_BASELINE,
            900,
        ),
        (Usage(input_tokens=800), UsageStatus.NO_CONFIRMED_USAGE, UsageStatus.NO_CONFIRMED_USAGE, None),
        (Usage(output_tokens=100), UsageStatus.NO_CONFIRMED_USAGE, UsageStatus.NO_CONFIRMED_USAGE, None),
        (Usage(), UsageStatus.NO_CONFIRMED_USAGE, UsageStatus.NO_CONFIRMED_USAGE, None),
        (Usage(input_tokens=800), UsageStatus.CONFIRMED_BASELINE, UsageStatus.BASELINE_INVALIDATED, 500),
        (Usage(), UsageStatus.CONFIRMED_BASELINE, UsageStatus.BASELINE_INVALIDATED, 500),
        (Usage(total_tokens=1200), UsageStatus.BASELINE_INVALIDATED, UsageStatus.CONFIRMED_BASELINE, 1200),
    ],
    ids=[
        "total",
        "prompt+completion",
        "prompt-only",
        "completion-only",
        "none",
        "partial-after-baseline",
        "missing-after-baseline",
        "complete-after-invalidated",
    ],
)
def test_baseline_rules(usage: Usage, before: UsageStatus, status: UsageStatus, baseline: int | None) -> None:
    prior = UsageState(before, 500 if before is not UsageStatus.NO_CONFIRMED_USAGE else None)
    after = observe_usage(prior, usage, "m")
    assert after.status is status and after.baseline == baseline


def test_seed_example_and_unknown_capacity() -> None:
    state = UsageState(UsageStatus.CONFIRMED_BASELINE, 100_000)
    numbers = figures(state, 128_000, 8_192)
    assert numbers.usable_input == 119_808 and numbers.remaining == 19_808
    assert numbers.ratio == pytest.approx(0.8347, abs=1e-4)
    assert (
        ui_text(state, numbers, compression_required=False)
        == "last confirmed 83.5 %, about 19,808 tokens left"
    )
    assert (
        ui_text(state, numbers, compression_required=False, chinese=True)
        == "最近确认:83.5%,剩余约 19,808 Token"
    )
    for window, reserved in (
        (None, 8_192),
        (8_192, 8_192),
        (8_192, 10_000),
    ):  # unknown, or reservation ≥ window
        none = figures(state, window, reserved)
        assert none.ratio is None and none.remaining is None
    stale = figures(UsageState(UsageStatus.BASELINE_INVALIDATED, 100_000), 128_000, 8_192)
    assert stale.ratio is None and stale.remaining is None
    assert ui_text(UsageState(), stale, compression_required=False) == "the model returned no usage"


def reply(prompt: int | None, completion: int | None = 10, text: str = "ok") -> ModelReply:
    return ModelReply(Message("assistant", text), Usage(input_tokens=prompt, output_tokens=completion))


def cm_with(tmp_path: Path, **config) -> tuple[ContextManager, list[Event]]:
    cm = ContextManager(
        ModelSpec("m", 10_000, 1_000),
        config=ContextConfig(**config),
        workspace=tmp_path / "ws",
        tokenizer="heuristic",
    )
    events: list[Event] = []
    cm.events.subscribe(events.append)
    return cm, events


async def test_threshold_schedules_compression_before_the_next_call_and_invalidates(tmp_path: Path) -> None:
    cm, events = cm_with(tmp_path, reserved_tokens=1_000, min_keep_tokens=0)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(20)])
        await s.prepare()
        await s.record(reply(7_600, 50))  # (7600 + 50) / 9000 = 0.85 ≥ 0.85
        required = [e for e in events if e.type == "context.compression.required"]
        assert len(required) == 1 and required[0].to_dict()["next_call_baseline_tokens"] == 7_650
        assert required[0].to_dict()["compression_before_next_call"] is True
        completed = [e.to_dict() for e in events if e.type == "model.completed"][-1]
        assert (
            completed["baseline_ratio"] == pytest.approx(0.85)
            and completed["remaining_baseline_tokens"] == 1_350
        )
        assert completed["compression_required"] is True and completed["usage_status"] == "CONFIRMED_BASELINE"
        assert s.state.compression_required  # persisted in the compaction state
        # The same turn's next call (after a tool ran) consumes the flag first.
        await s.add([call("t1"), result("t1", "done")])
        view = await s.prepare()
        assert view.compacted and s.state.records[-1].reason == "THRESHOLD_REACHED"
        assert not s.state.compression_required
        assert s.usage.status is UsageStatus.BASELINE_INVALIDATED
        done = [e.to_dict() for e in events if e.type == "context.compression.completed"][-1]
        assert done["usage_status"] == "BASELINE_INVALIDATED" and done["usage_baseline_valid"] is False
        await s.record(reply(3_000, 20))
        assert s.usage.status is UsageStatus.CONFIRMED_BASELINE and s.usage.baseline == 3_020


async def test_threshold_of_exactly_one(tmp_path: Path) -> None:
    cm, _ = cm_with(tmp_path, reserved_tokens=1_000, compression_threshold_ratio=1.0)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK])
        await s.prepare()
        await s.record(reply(8_980, 10))  # 8990 / 9000 < 1.0
        assert not s.state.compression_required
        await s.add(TASK)
        await s.prepare()
        await s.record(reply(8_990, 10))  # exactly 1.0
        assert s.state.compression_required


async def test_missing_usage_after_a_valid_baseline(tmp_path: Path) -> None:
    cm, events = cm_with(tmp_path)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK])
        await s.prepare()
        await s.record(reply(500, 10))
        await s.add(TASK)
        await s.prepare()
        await s.record(reply(None, None))
    last = [e.to_dict() for e in events if e.type == "model.completed"][-1]
    assert last["usage_source"] == UsageSource.UNAVAILABLE.value
    assert last["usage_status"] == "BASELINE_INVALIDATED" and last["baseline_ratio"] is None
    assert last["next_call_baseline_tokens"] is None and last["usage_baseline_valid"] is False


async def test_unknown_capacity_reports_usage_without_ratio_and_never_schedules(tmp_path: Path) -> None:
    cm = ContextManager(ModelSpec("private-model"), workspace=tmp_path / "ws", tokenizer="heuristic")
    events: list[Event] = []
    cm.events.subscribe(events.append)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK])
        view = await s.prepare()
        await s.record(reply(10**6, 10))
    assert view.status.ratio is None and view.status.state is None
    done = [e.to_dict() for e in events if e.type == "model.completed"][-1]
    assert (
        done["input_tokens"] == 10**6 and done["baseline_ratio"] is None and not done["compression_required"]
    )


async def test_scope_keeps_models_and_agents_apart(tmp_path: Path) -> None:
    first, _ = cm_with(tmp_path)
    async with first.session("c", agent_id="a", agent_version="1") as s:
        await s.add([SYSTEM, TASK])
        await s.prepare()
        await s.record(reply(500, 10))
        assert s.usage.baseline == 510
    other_model = ContextManager(ModelSpec("other", 10_000), workspace=tmp_path / "ws", tokenizer="heuristic")
    other_model.store = first.store
    async with other_model.session("c", agent_id="a", agent_version="1") as s:
        assert s.usage.status is UsageStatus.NO_CONFIRMED_USAGE
    async with first.session("c", agent_id="a", agent_version="2") as s:
        assert s.usage.status is UsageStatus.NO_CONFIRMED_USAGE
    async with first.session("c", agent_id="a", agent_version="1") as s:
        assert s.usage.baseline == 510  # persisted


async def test_confirmed_only_mode_never_shows_or_acts_on_local_figures(tmp_path: Path) -> None:
    cm, _ = cm_with(tmp_path, usage_mode="confirmed_only", reserved_tokens=1_000)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(40)])  # locally far over the warning level
        view = await s.prepare()
        assert not view.compacted
        assert view.status.ratio is None and view.status.used == 0
        await s.record(reply(4_500, 0))
        await s.add(TASK)
        view = await s.prepare()
        assert view.status.used == 4_500 and view.status.source == "provider_confirmed"
        assert view.status.ratio == pytest.approx(0.5)


async def test_local_only_mode_never_schedules_from_usage(tmp_path: Path) -> None:
    cm, _ = cm_with(tmp_path, usage_mode="local_only", reserved_tokens=1_000)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK])
        await s.prepare()
        await s.record(reply(8_999, 0))
        assert not s.state.compression_required


def test_policy_without_a_compaction_path_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="usage_policy_enabled"):
        ContextManager(
            ModelSpec("m", 1000),
            config=ContextConfig(layers=()),
            fallback_summarizer=None,
            workspace=tmp_path,
        )
    ContextManager(
        ModelSpec("m", 1000),
        config=ContextConfig(layers=(), usage_policy_enabled=False),
        fallback_summarizer=None,
        workspace=tmp_path,
    )


async def test_recording_sdk_shaped_replies(tmp_path: Path) -> None:
    cm, _ = manager(tmp_path), None
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK])
        await s.prepare()
        completion = {
            "choices": [{"message": {"role": "assistant", "content": "hi"}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22},
        }
        stored = await s.record(completion)
        assert stored.text == "hi" and s.usage.baseline == 22
