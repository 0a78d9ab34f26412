"""Property tests over generated histories: the invariants every view must keep."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkeep._messages import Message
from contextkeep._rounds import split_rounds
from support import manager

SYSTEM = {"role": "system", "content": "You are an agent. Follow the rules."}


@st.composite
def histories(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Batches of messages, each batch ending a complete round (what an agent adds between calls)."""
    batches: list[list[dict[str, Any]]] = [
        [SYSTEM, {"role": "user", "content": draw(st.text(min_size=1, max_size=300))}]
    ]
    n_calls = 0
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["tools", "tools", "tools", "text", "user"]))
        if kind == "user":
            batches.append([{"role": "user", "content": draw(st.text(min_size=1, max_size=200))}])
            continue
        if kind == "text":
            batches.append([{"role": "assistant", "content": draw(st.text(max_size=200))}])
            continue
        ids = [f"call{n_calls + i}" for i in range(draw(st.integers(1, 3)))]
        n_calls += len(ids)
        calls = [
            {"id": i, "type": "function", "function": {"name": "t", "arguments": json.dumps({"i": i})}}
            for i in ids
        ]
        results = [
            {"role": "tool", "tool_call_id": i, "content": "r" * draw(st.integers(0, 2500)) + " end"}
            for i in draw(st.permutations(ids))  # results may arrive in any order
        ]
        batches.append(
            [{"role": "assistant", "content": draw(st.text(max_size=80)), "tool_calls": calls}, *results]
        )
    return batches


def check_pairing(view: list[Message]) -> None:
    split_rounds(view)  # raises on an orphan result, a call without result, or a duplicate id
    calls = {c.id for m in view for c in m.tool_calls}
    results = {m.tool_call_id for m in view if m.role == "tool"}
    assert calls == results


@pytest.mark.slow  # 40 generated histories, each compacted end to end: 5-7 s
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=histories(),
    window=st.integers(1500, 9000),
    keep=st.integers(1, 3),
    limit=st.integers(100, 800),
)
def test_every_view_keeps_the_invariants(
    batches: list[list[dict[str, Any]]], window: int, keep: int, limit: int
) -> None:
    asyncio.run(_run(batches, window, keep, limit))


async def _run(batches: list[list[dict[str, Any]]], window: int, keep: int, limit: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cm = manager(
            Path(tmp), window, min_keep_recent_rounds=keep, tool_result_limit=limit, min_keep_tokens=300
        )
        async with cm.session("p") as s:
            for batch in batches:
                await s.add(batch)
                before = list(s.transcript)
                view = await s.prepare()
                assert list(s.transcript) == before  # the transcript is never modified
                check_pairing(view.neutral)
                # The system prompt is first and intact.
                assert view.neutral[0].role == "system" and view.neutral[0].text == SYSTEM["content"]
                # The newest `keep` rounds are verbatim (as layer 0 shows every long result).
                rounds = [r for r in split_rounds(list(s.transcript)) if r.kind != "system"]
                tail = [m for r in rounds[-keep:] for m in s.transcript[r.start : r.end]]
                derived = [
                    s._builder._derive(m, len(s.transcript), s.state.evolve(mask_boundary=0)) for m in tail
                ]
                assert [(m.role, m.text, m.tool_calls) for m in view.neutral[-len(tail) :]] == [
                    (m.role, m.text, m.tool_calls) for m in derived
                ]
                # The view fits whenever the system prompt and the last two rounds fit.
                effective = s.budget().effective
                assert effective is not None
                last_two = [m for r in rounds[-2:] for m in s.transcript[r.start : r.end]]
                floor = s.counter.count_prompt(
                    [
                        view.neutral[0],
                        *(s._builder._derive(m, 0, s.state.evolve(mask_boundary=0)) for m in last_two),
                    ]
                )
                if floor <= effective:
                    assert view.tokens <= effective, (view.tokens, effective, floor)
                # Determinism: another manager on the same store builds the byte-identical view.
                twin = manager(
                    Path(tmp),
                    window,
                    min_keep_recent_rounds=keep,
                    tool_result_limit=limit,
                    min_keep_tokens=300,
                )
                twin.store = cm.store
                async with twin.session("p") as again:
                    assert again.state == s.state
                    same = (await again.current_view()).neutral
                    assert [m.text for m in same] == [m.text for m in view.neutral]
