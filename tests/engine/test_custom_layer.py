"""A layer of one's own, written here (outside `src/`): registered by name, enabled by config,
seen in events, in the persisted records, in a replay and in the replay report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._cli.replay import measure
from contextkeep._compaction import Layer, PassContext, register_layer
from contextkeep._config import ContextConfig
from contextkeep._errors import ConfigError
from contextkeep._events import CompressionCompleted, ContextStatus, Event
from contextkeep._formats.openai import from_openai
from contextkeep._manager import ContextManager
from contextkeep._tokens import HeuristicEncoder
from contextkeep.replay import Trajectory, replay
from contextkeep.replay.presets import Preset
from contextkeep.replay.report import render_report
from contextkeep.replay.trajectories import RecordedCall
from support import assert_references_readable, call, manager, result


class DropDuplicateReads:
    """Masks a tool output that a later one repeats word for word (the same file read again).

    The masked output keeps its preview and its reference, so the agent can read it back.
    """

    name = "dedupe"

    def decide(self, ctx: PassContext) -> bool:
        return ctx.tokens > ctx.target

    async def apply(self, ctx: PassContext) -> None:
        state, later, superseded = ctx.state, set[str](), list[int]()
        for i in range(len(ctx.transcript) - 1, state.cut - 1, -1):  # newest first
            m = ctx.transcript[i]
            if m.role != "tool":
                continue
            if m.text in later and i < ctx.protect and i not in state.masked:
                superseded.append(i)
            later.add(m.text)
        if superseded:
            masked = tuple(sorted({*state.masked, *superseded}))
            ctx.propose(self.name, state.evolve(masked=masked), span=(superseded[-1], superseded[0] + 1))


register_layer("dedupe", DropDuplicateReads, replace=True)  # a factory: made when first used
LAYERS = ("dedupe", "L1", "L2", "L3")
FILE = "\n".join(f"line {n}: value_{n} = compute({n})" for n in range(90))  # about 2,700 characters


def reads(n: int) -> list[dict[str, Any]]:
    """`n` rounds that each read the same file, then make a small edit."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        out += [call(f"r{i}", "cat src/app.py"), result(f"r{i}", FILE)]
        out += [call(f"e{i}", f"sed -i s/{i}/x/ src/app.py"), result(f"e{i}", "ok")]
    return out


def test_the_layer_meets_the_protocol() -> None:
    assert isinstance(DropDuplicateReads(), Layer)


async def test_a_registered_layer_runs_by_config_and_shows_in_events_and_records(tmp_path: Path) -> None:
    # A target the layer reaches alone: this is about the layer, not how deep the default target goes.
    cm = manager(tmp_path, 4000, layers=LAYERS, tool_result_limit_max_ratio=None, target_ratio=0.35)
    events: list[Event] = []
    cm.events.subscribe(events.append)
    async with cm.session("c") as s:
        await s.add(
            [{"role": "system", "content": "You edit files."}, {"role": "user", "content": "Fix it."}]
        )
        await s.add(reads(4))  # the newest read is among the three protected rounds
        view = await s.prepare()
        state = s.state
    assert view.compacted == ("dedupe",)  # enough on its own: L1–L3 never ran
    tools = [m for m in view.neutral if m.role == "tool" and m.tool_call_id and m.tool_call_id[0] == "r"]
    assert [m.text == FILE for m in tools] == [False, False, False, True]  # the last read stays verbatim
    assert await assert_references_readable(cm.workspace, view.neutral) == 3
    layers = [e.compact_layer for e in events if isinstance(e, ContextStatus) and e.compact_layer]
    assert layers == ["dedupe"]
    completed = [e for e in events if isinstance(e, CompressionCompleted)]
    assert [(e.layer, e.tokens_after < e.tokens_before) for e in completed] == [("dedupe", True)]
    assert [r.layer for r in state.records] == ["dedupe"]
    async with cm.session("c") as again:  # what the layer decided is persisted: the same view after a reload
        assert (await again.current_view()).neutral == view.neutral
        assert again.state.masked == state.masked


def trajectory(rounds: int) -> Trajectory:
    messages = from_openai(
        [{"role": "system", "content": "You edit files."}, {"role": "user", "content": "Fix it."}]
    )
    calls = []
    for message in from_openai(reads(rounds)):
        if message.role == "assistant":
            calls.append(RecordedCall(len(messages), None))
        messages.append(message)
    return Trajectory("reads", "openai", messages, model="gpt-4o", calls=calls)


async def test_a_replay_counts_the_layer_among_its_compactions(tmp_path: Path) -> None:
    config = ContextConfig(layers=LAYERS, tool_result_limit_max_ratio=None)
    cm = ContextManager(
        ModelSpec("gpt-4o", 4000), config=config, workspace=tmp_path / "ws", tokenizer="heuristic"
    )
    replayed = await replay(trajectory(6), cm)
    assert replayed.compactions.get("dedupe", 0) >= 1
    assert replayed.over_budget_calls == 0 and replayed.invariant_violations == 0


async def test_the_report_colours_an_unknown_layer_by_default(tmp_path: Path) -> None:
    preset = Preset(
        "dedupe",
        "drop duplicate reads first",
        "this test",
        {"layers": LAYERS, "tool_result_limit_max_ratio": None},
    )
    measured = await measure(
        trajectory(6), preset, workspace=tmp_path / "ws", window=4000, encoder=HeuristicEncoder()
    )
    assert "dedupe" in measured.metrics.compactions
    html = render_report([measured.entry])
    assert '<span style="color:#555">● dedupe</span>' in html
    assert 'fill="#555"><title>call' in html  # its markers on the chart


def test_registering_checks_the_name() -> None:
    with pytest.raises(ConfigError):
        register_layer("dedupe", DropDuplicateReads)  # taken (without replace=True)
    with pytest.raises(ConfigError):
        register_layer("pipeline", DropDuplicateReads)  # what events call the whole pass
    with pytest.raises(ConfigError):
        register_layer("L5", DropDuplicateReads())  # the layer calls itself "dedupe"


async def test_an_unknown_layer_is_named_when_the_session_is_built(tmp_path: Path) -> None:
    cm = manager(tmp_path, 3000, layers=("dedupe", "no_such_layer"))
    with pytest.raises(ConfigError) as info:
        async with cm.session("c"):
            pass
    assert info.value.key == "layers.1" and "no_such_layer" in str(info.value)
