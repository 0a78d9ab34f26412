"""`bench_calls.py --memory`: what sessions hold in RAM, each figure measured in a fresh subprocess.

- RSS after 1 and after 100 sessions whose tokenizer is the same spec (`hf:` DeepSeek
  `tokenizer.json`, shared per process), each holding the trajectory's first 40 messages, prepared.
- What a session holds (tracemalloc) for a 10,000-message history added call by call, prepared and
  converted, against the history's JSON size (the lossless OpenAI form).

    TIKTOKEN_CACHE_DIR=../shared/tokenizers .venv/bin/python benchmarks/_bench_calls_memory.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import tracemalloc
from typing import Any

from _bench_subject import HUGE_WINDOW
from bench_compaction import DEEPSEEK_TOKENIZER, SHARED, TRAJECTORY, lengthened

from contextkeep._capabilities import ModelSpec
from contextkeep._formats import to_openai
from contextkeep._manager import ContextManager
from contextkeep._tokens import HFEncoder, counter_for_model
from contextkeep.replay.trajectories import load_trajectories


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


async def child_sessions(count: int) -> None:
    """RSS after `count` sessions on one tokenizer spec, each holding the first 40 messages, prepared."""
    (trajectory,) = load_trajectories(TRAJECTORY)
    spec = f"hf:{DEEPSEEK_TOKENIZER}"
    with tempfile.TemporaryDirectory(prefix="bench-calls-") as tmp:
        manager = ContextManager(ModelSpec(trajectory.model, HUGE_WINDOW), workspace=tmp, tokenizer=spec)
        async with (
            contextlib.AsyncExitStack() as stack
        ):  # the sessions close (and flush) before the folder goes
            for n in range(count):
                s = await stack.enter_async_context(manager.session(f"s{n}"))
                await s.add(trajectory.messages[:40])
                (await s.prepare(tools=trajectory.tools)).messages  # noqa: B018
            print(json.dumps({"rss_mib": rss_mib()}))
        await manager.close()


async def child_history(messages: int) -> None:
    """Bytes a session holds for a `messages`-message history (tracemalloc), against its JSON size."""
    (trajectory,) = load_trajectories(TRAJECTORY)
    trajectory = lengthened(trajectory, messages)
    text = json.dumps(to_openai(trajectory.messages, lossless=True), ensure_ascii=False)
    calls = [c.index for c in trajectory.calls]
    encoder = HFEncoder(DEEPSEEK_TOKENIZER)
    del trajectory
    with tempfile.TemporaryDirectory(prefix="bench-calls-") as tmp:
        manager = ContextManager(
            ModelSpec("deepseek-chat", HUGE_WINDOW),
            workspace=tmp,
            counter_factory=lambda: counter_for_model("deepseek-chat", encoder),
        )
        tracemalloc.start()
        history = json.loads(text)
        async with manager.session("h") as s:
            added = 0
            for index in [*calls, len(history)]:  # call by call, as an agent adds them
                await s.add(history[added:index])
                added = index
            view = await s.prepare()
            view.messages  # noqa: B018
            del history, view
            held = tracemalloc.get_traced_memory()[0]
            print(json.dumps({"messages": len(s.transcript), "json_bytes": len(text.encode()), "held": held}))
        tracemalloc.stop()


def measure_child(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True, env=os.environ
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def memory_report() -> None:
    one = measure_child("--child-sessions", "1")["rss_mib"]
    hundred = measure_child("--child-sessions", "100")["rss_mib"]
    print(
        f"\nRSS, one DeepSeek tokenizer shared: 1 session {one:.0f} MiB, 100 sessions {hundred:.0f} MiB "
        f"({hundred / one:.2f}x; target <= 1.5x)"
    )
    h = measure_child("--child-history", "10000")
    per = h["held"] / h["messages"]
    print(
        f"{h['messages']}-message history: session holds {h['held'] / 2**20:.1f} MiB (tracemalloc) for "
        f"{h['json_bytes'] / 2**20:.1f} MiB of JSON ({h['held'] / h['json_bytes']:.2f}x; target <= 3x), "
        f"{per:.0f} bytes per message ({h['json_bytes'] / h['messages']:.0f} of JSON)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--child-sessions", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-history", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tokenizers"))
    logging.disable(logging.WARNING)
    if args.child_sessions:
        asyncio.run(child_sessions(args.child_sessions))
    elif args.child_history:
        asyncio.run(child_history(args.child_history))
    else:
        memory_report()


if __name__ == "__main__":
    main()
