"""One agent process of the offload race and soak tests, on a shared conversation with reused call ids.

Run as `python tests/support/race_worker.py SPEC_JSON`. Like real agents (and the shared
trajectories), every worker names its tool calls `call_0` and `call_1` over and over. Each step
appends one round (the call and its long result, atomically) and prepares a view; the tags of
what `add` returned go to the worker's journal afterwards, so the test knows what was
acknowledged. A worker killed and started again resumes after its last stored round.

When every peer is done, the workers prepare their final views one after the other and write
them to `{worker}.view.json`, so the views can be compared across instances. With `hold_writes`,
no tool-result file is ever written (a disk that never answers): `add` must return anyway.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._offload import LocalWorkspace
from contextkeep._rounds import split_rounds
from contextkeep._session import Session
from contextkeep.stores import open_store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: `support` is a sibling
from support.store_worker import CountingSummarizer, Trip, append_line

WORKER = Path(__file__).resolve()


def launch(spec: Mapping[str, Any], stderr: Path) -> subprocess.Popen[bytes]:
    """Start a worker (its stderr goes to a file, appended to across restarts)."""
    with stderr.open("ab") as err:
        return subprocess.Popen([sys.executable, str(WORKER), json.dumps(spec)], stderr=err)


def tag(m: Message) -> str:
    """What identifies a worker's message: `{worker}:{step}:{role}` (the text starts with it)."""
    return f"{m.text.split(' ', 1)[0]}:{m.role}"


def step_messages(worker: str, step: int) -> list[dict[str, Any]]:
    """One round: a call whose id other rounds and workers reuse, and its long, unique result."""
    name, cid = f"{worker}:{step}", f"call_{step % 2}"
    call = {
        "role": "assistant",
        "content": f"{name} next command",
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"cmd {step}"})},
            }
        ],
    }
    body = f"{name} HEAD " + f"{worker}{step}-" * (400 + (step * 37) % 300) + f" TAIL {name}"
    return [call, {"role": "tool", "tool_call_id": cid, "content": body}]


class HeldWorkspace(LocalWorkspace):
    """A local workspace whose tool-result files are never written: the write blocks forever."""

    def _replace_many(self, files: Mapping[str, bytes]) -> None:
        if any("/tool_result-" in path for path in files):
            threading.Event().wait()
        super()._replace_many(files)


def build_manager(spec: Mapping[str, Any]) -> ContextManager:
    """The manager of every process of a test (the same config: the view is a function of it)."""
    workspace = (HeldWorkspace if spec.get("hold_writes") else LocalWorkspace)(spec["workspace"])
    return ContextManager(
        ModelSpec("test-model", int(spec["window"])),
        config=ContextConfig(**spec["config"]),
        store=open_store(spec["store"]),
        workspace=workspace,
        summarizer=CountingSummarizer(Path(spec["summaries"]), Trip(None, 0)),
        fallback_summarizer=None,
        tokenizer="heuristic",
    )


async def _wait_for(folder: Path, workers: Sequence[str], mark: str) -> None:
    """Until every worker in `workers` left its `{worker}.{mark}` file (peers may be restarting)."""
    deadline = time.monotonic() + 300
    while not all((folder / f"{w}.{mark}").exists() for w in workers):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the peers never reached {mark!r}")
        await asyncio.sleep(0.01)


def _resume(s: Session, worker: str) -> int:
    """The first step this worker has not stored yet."""
    steps = [
        int(tag(m).split(":")[1])
        for m in s.transcript
        if m.role == "tool" and m.text.startswith(f"{worker}:")
    ]
    return max(steps, default=-1) + 1


async def run(spec: Mapping[str, Any]) -> None:
    cm = build_manager(spec)
    folder, worker, peers = Path(spec["folder"]), str(spec["worker"]), list(spec["peers"])
    journal = folder / f"{worker}.journal"
    cm.events.subscribe(lambda e: append_line(folder / f"{worker}.conflicts", e.kind), "store.conflict")
    try:
        async with cm.session(spec["conversation"]) as s:
            (folder / f"{worker}.ready").touch()
            await _wait_for(folder, peers, "ready")  # start together, so the steps really interleave
            for step in range(_resume(s, worker), int(spec["steps"])):
                stored = await s.add(step_messages(worker, step))
                append_line(journal, json.dumps([tag(m) for m in stored]))
                if spec.get("hold_writes"):
                    continue  # the test kills this process once it acknowledged enough
                split_rounds((await s.prepare()).neutral)  # pairing intact in every view
            (folder / f"{worker}.done").touch()
            await _wait_for(folder, peers, "done")
            await _wait_for(folder, peers[: peers.index(worker)], "viewed")
            view = await s.prepare()
            (folder / f"{worker}.view.json").write_text(json.dumps(view.messages, ensure_ascii=False))
            (folder / f"{worker}.viewed").touch()
    finally:
        await cm.close()


# -- the test's side ------------------------------------------------------------------------


@dataclass
class Run:
    """What a run of the workers did."""

    kills: int = 0
    conflicts: int = 0
    """Appends and saves that lost a compare-and-set (the instances really raced)."""
    views: dict[str, bytes] = field(default_factory=dict)
    journals: dict[str, list[str]] = field(default_factory=dict)


async def run_workers(
    spec: Mapping[str, Any], workers: Sequence[str], rng: random.Random | None = None, kills: int = 0
) -> Run:
    """Run one process per worker to the end; with `rng`, SIGKILL one (the first time as soon as one
    acknowledged a round, then at random moments; at most `kills` times) and restart it.

    Only a worker that acknowledged a round since it (re)started is killed, so every restart
    makes progress; none is killed once done with its steps.
    """
    folder = Path(spec["folder"])
    specs = {w: {**spec, "worker": w, "peers": list(workers)} for w in workers}
    procs = {w: launch(specs[w], folder / f"{w}.err") for w in workers}
    acked = dict.fromkeys(workers, 0)
    result = Run()
    # The first kill comes as soon as a round is acknowledged (a run of 20 steps may be over
    # within a second); the next ones at random moments after each restart.
    next_kill = time.monotonic() if rng else float("inf")
    while procs:
        for w, proc in list(procs.items()):
            if (code := proc.poll()) is not None:
                del procs[w]
                assert code == 0, (folder / f"{w}.err").read_text()[-3000:]
        if rng and result.kills < kills and time.monotonic() >= next_kill:
            going = [
                w for w in procs if len(journal(folder, w)) > acked[w] and not (folder / f"{w}.done").exists()
            ]
            if going:
                victim = rng.choice(going)
                procs[victim].kill()
                procs[victim].wait()
                result.kills += 1
                acked[victim] = len(journal(folder, victim))
                procs[victim] = launch(specs[victim], folder / f"{victim}.err")
                next_kill = time.monotonic() + rng.uniform(0.0, 0.6)
        await asyncio.sleep(0.02)
    for w in workers:
        result.views[w] = (folder / f"{w}.view.json").read_bytes()
        result.journals[w] = journal(folder, w)
        conflicts = folder / f"{w}.conflicts"
        result.conflicts += len(conflicts.read_text().splitlines()) if conflicts.exists() else 0
    return result


def journal(folder: Path, worker: str) -> list[str]:
    """The tags `add` returned to `worker`, in order (a line is written only after `add` returned)."""
    path = folder / f"{worker}.journal"
    return [t for line in path.read_text().splitlines() for t in json.loads(line)] if path.exists() else []


def main() -> None:
    asyncio.run(run(json.loads(sys.argv[1])))
    os._exit(0)  # a held write never returns: do not wait for its thread


if __name__ == "__main__":
    main()
