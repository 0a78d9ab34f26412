"""Layer 1 previews keep the lines naming what the agent used, frozen when masked, never the longer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contextkeep._messages import Message
from support import call, manager, result

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Fix the failing test in src/app.py"}
FILLER = "\n".join(f"noise line {j} with nothing of interest" for j in range(30))


def _round(i: int) -> list[dict[str, Any]]:
    body = f"{FILLER}\n{400 + i}: def compute_total_{i}(items):\n{FILLER}"
    said = {"role": "assistant", "content": f"compute_total_{i} looks wrong."}
    return [call(f"c{i}", f"cat src/app_{i}.py"), result(f"c{i}", body), said]


def _outputs(view: list[Message]) -> dict[str, str]:
    return {m.tool_call_id or "": m.text for m in view if m.role == "tool"}


async def test_a_masked_preview_keeps_the_line_the_agent_used_and_does_not_change_later(
    tmp_path: Path,
) -> None:
    cm = manager(tmp_path, 6000, layers=("L1",), mask_min_saving_tokens=0)  # the default: 300 characters
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK] + [m for i in range(12) for m in _round(i)])
        first = _outputs((await s.prepare()).neutral)
        preview = first["c0"]
        assert "[Full detail available at:" in preview  # masked
        assert "400: def compute_total_0(items):" in preview
        assert "noise line 12 " not in preview
        assert len(preview) < len(FILLER) * 2
        await s.add([m for i in range(12, 20) for m in _round(i)])
        later = _outputs((await s.prepare()).neutral)
        assert later["c0"] == preview  # frozen: the cached prefix holds


async def test_with_the_option_off_previews_are_head_and_tail(tmp_path: Path) -> None:
    cm = manager(tmp_path, 6000, layers=("L1",), mask_used_lines_chars=0, mask_min_saving_tokens=0)
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK] + [m for i in range(12) for m in _round(i)])
        preview = _outputs((await s.prepare()).neutral)["c0"]
        assert "[Full detail available at:" in preview and "def compute_total_0" not in preview


async def test_a_preview_with_its_lines_is_never_longer_than_the_output(tmp_path: Path) -> None:
    short = "\n".join([f"{400 + j}: def compute_total_0_{j}(items): pass" for j in range(8)])
    history: list[dict[str, Any]] = [SYSTEM, TASK, call("c0", "cat src/app.py"), result("c0", short)]
    history.append({"role": "assistant", "content": " ".join(f"compute_total_0_{j}" for j in range(8))})
    history += [m for i in range(1, 12) for m in _round(i)]
    cm = manager(tmp_path, 6000, layers=("L1",), mask_used_lines_chars=2000, mask_min_saving_tokens=0)
    async with cm.session("c") as s:
        await s.add(history)
        preview = _outputs((await s.prepare()).neutral)["c0"]
        assert len(preview) <= len(short) or preview == short
