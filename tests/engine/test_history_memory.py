"""What a session holds in RAM for a history: at most 3x the history's JSON (issue #20, acceptance 3)."""

from __future__ import annotations

import gc
import json
import tracemalloc

from contextkeep._formats import to_openai
from contextkeep.replay.trajectories import load_trajectories
from support import manager, require_shared


async def test_a_history_in_ram_holds_each_message_once_not_again_as_json(tmp_path):
    (trajectory,) = load_trajectories(
        require_shared("trajectories", "mini-swe-agent", "django__django-14997.traj.json")
    )
    calls = [c.index for c in trajectory.calls][:-1]  # the last call's results were never recorded
    text = json.dumps(to_openai(trajectory.messages[: calls[-1] + 2], lossless=True), ensure_ascii=False)
    cm = manager(tmp_path, window=None)
    gc.collect()
    tracemalloc.start()
    try:
        history = json.loads(text)  # parsed while traced: the session's messages hold these strings
        async with cm.session("memory") as s:
            added = 0
            for index in [*calls, len(history)]:
                await s.add(history[added:index])
                added = index
            view = await s.prepare()
            assert len(view.messages) == len(history)
            del history, view
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held <= 3 * len(text.encode()), held / len(text.encode())
