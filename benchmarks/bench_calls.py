"""The whole call: what a caller waits for per model call, contextkeep vs the anchors, as the history grows.

Replays mini-swe-agent django__django-14997 (261 messages), then its rounds repeated
(`bench_compaction.lengthened`) to 1,001, 2,501 and 10,000 messages. At every model call each
library does its step on the same prompt, interleaved call by call, and the time is recorded:

- contextkeep (exact DeepSeek tokenizer, in-memory store, local workspace in a temp folder):
  `record(reply)`, the tools run, `add(tool results)`, `prepare(tools)`, `view.messages`; then the
  model call. The four timed steps are the call. Standing for the tools and for the model call, the
  loop idles and the workspace copies `add` queued are written (untimed: real tools take longer).
- AgentScope 2.0: `agent.compress_context()` (counts the prompt and decides; under its trigger).
- LangChain 1.x: `SummarizationMiddleware.before_model` under its trigger, and `trim_messages`
  to the window (`count_tokens_approximately`, `strategy="last"`).
- pydantic-ai-harness: `SummarizingCompaction.before_model_request` under its trigger (its count
  anchors on the last response's provider usage, estimating only what came after).
The anchors' appends to their own history are not timed, nor is any conversion of theirs to a
provider's format (contextkeep's `view.messages` is): the comparison leans their way.
The window is 10M tokens, so nothing compacts: the view holds the whole history, the worst case.

Run it in the environment that holds the anchors (from the repo root):

    python3 -m venv /work/bench-venv
    /work/bench-venv/bin/pip install -e . -r benchmarks/requirements-compare.txt
    TIKTOKEN_CACHE_DIR=../shared/tokenizers /work/bench-venv/bin/python benchmarks/bench_calls.py \
        [--sizes 261,1001,2501,10000] [--repeat 1] [--plot docs/performance-calls.png] [--memory]
        [--profile]

`--memory` also prints, each measured in a fresh subprocess: the RSS of 1 and of 100 sessions
sharing one DeepSeek tokenizer, and what a 10,000-message history holds in RAM against its JSON size.
`--profile` also replays the first size with contextkeep alone under cProfile (only its four timed
steps): the function calls per call, a figure that does not move with the machine's speed, and
the hot spots.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import logging
import os
import pstats
import statistics
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _bench_anchors import AgentScope, Harness, LangChain, TrimMessages
from _bench_calls_memory import memory_report
from _bench_machine import machine_line
from _bench_subject import HUGE_WINDOW, StubSummarizer, Subject, profiling, timed
from bench_compaction import DEEPSEEK_TOKENIZER, SHARED, TRAJECTORY, lengthened

from contextkeep._capabilities import ModelSpec
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._offload import LocalWorkspace
from contextkeep._session import Session
from contextkeep._tokens import HFEncoder, counter_for_model
from contextkeep.replay.trajectories import Trajectory, load_trajectories

STEPS = ("record", "add", "prepare", "messages")
measured = timed
"""What every step is run by (`bench_instructions.py` runs them its own way)."""
CPU = "cpu"
"""contextkeep: the CPU time of the four steps on the caller's thread (what load and waits leave out)."""


class ContextKeepCalls:
    """contextkeep: the four steps of a call, each timed."""

    name = "contextkeep"
    counter = "deepseek tokenizer.json (exact)"

    def __init__(self, trajectory: Trajectory, encoder: HFEncoder, root: Path) -> None:
        self.trajectory, self._encoder, self._root = trajectory, encoder, root
        self._stack = contextlib.AsyncExitStack()
        self.session: Session | None = None

    async def open(self) -> None:
        await self._stack.aclose()
        model = self.trajectory.model
        manager = ContextManager(
            ModelSpec(model, context_window=HUGE_WINDOW),
            store="memory://",
            workspace=LocalWorkspace(self._root),
            summarizer=StubSummarizer(),
            counter_factory=lambda: counter_for_model(model, self._encoder),
        )
        self.session = await self._stack.enter_async_context(manager.session("calls"))

    async def start(self, messages: Sequence[Message]) -> None:
        assert self.session is not None
        await self.session.add(messages)
        (await self.session.prepare(tools=self.trajectory.tools)).messages  # noqa: B018

    async def step(
        self, reply: Message, results: Sequence[Message], *, timed: bool = True
    ) -> dict[str, float]:
        s, tools = self.session, self.trajectory.tools
        assert s is not None
        cpu = time.thread_time()
        out = {"record": (await measured(lambda: s.record(reply)))[0]}
        cpu = time.thread_time() - cpu
        await self._idle()  # the tools run
        cpu -= time.thread_time()
        out["add"] = (await measured(lambda: s.add(results)))[0]
        out["prepare"], view = await measured(lambda: s.prepare(tools=tools))
        out["messages"] = (await measured(lambda: view.messages))[0]
        out[CPU] = cpu + time.thread_time()
        await self._idle()  # the model call
        return out

    async def _idle(self) -> None:
        """A tool run or a model call: long enough for what contextkeep does in the background."""
        assert self.session is not None
        await asyncio.sleep(0)
        await self.session.flush()  # the workspace copies `add` queued (real tools take far longer)

    async def close(self) -> None:
        await self._stack.aclose()


class Anchor:
    """A comparison library's per-call step (`Subject.check`), its history extended untimed."""

    def __init__(self, subject: Subject, label: str = "") -> None:
        self.subject = subject
        self.name = f"{subject.name}{label}"
        self.counter = subject.counter

    async def open(self) -> None:
        await self.subject.open(HUGE_WINDOW)

    async def start(self, messages: Sequence[Message]) -> None:
        await self.subject.extend(messages)
        await measured(self.subject.check)

    async def step(
        self, reply: Message, results: Sequence[Message], *, timed: bool = True
    ) -> dict[str, float] | None:
        await self.subject.extend([reply])
        await self.subject.idle()
        await self.subject.extend(results)
        if not timed:
            return None
        took = (await measured(self.subject.check))[0]
        await self.subject.idle()
        return {"check": took}

    async def close(self) -> None:
        return None


Driver = ContextKeepCalls | Anchor


def drivers(
    trajectory: Trajectory, encoder: HFEncoder, root: Path, *, with_anchors: bool = True
) -> tuple[list[Driver], list[str]]:
    """contextkeep and (`with_anchors`) every anchor installed here; a note for each one that is not."""
    found: list[Driver] = [ContextKeepCalls(trajectory, encoder, root)]
    notes: list[str] = []
    if not with_anchors:
        return found, notes
    anchors: list[tuple[str, Any]] = [
        ("agentscope", lambda: Anchor(AgentScope(trajectory))),
        ("langchain", lambda: Anchor(LangChain(trajectory), " SummarizationMiddleware")),
        ("langchain", lambda: Anchor(TrimMessages(trajectory), " trim_messages")),
        ("pydantic_ai_harness", lambda: Anchor(Harness(trajectory))),
    ]
    for module, make in anchors:
        if importlib.util.find_spec(module) is None:
            notes.append(f"{module} is not installed: skipped (see benchmarks/requirements-compare.txt)")
        else:
            found.append(make())
    return found, sorted(set(notes))


Samples = list[tuple[int, dict[str, float]]]
"""Per timed call: the messages in its prompt, and the median seconds of each step."""


async def replay(trajectory: Trajectory, found: Sequence[Driver], repeat: int, calls: int) -> list[Samples]:
    """Per driver: each step timed over `repeat` replays, interleaved per call.

    contextkeep is timed at every call; an anchor at about `calls` of them, evenly spread (it keeps
    no state between checks, so the calls it skips only extend its history).
    """
    messages, starts = trajectory.messages, [c.index for c in trajectory.calls]
    ends = starts[1:]  # each step ends with the prompt of the next call
    every = max(len(ends) // calls, 1)
    samples: list[list[list[dict[str, float]]]] = [[[] for _ in ends] for _ in found]
    for _ in range(repeat):
        for d in found:
            await d.open()
            await d.start(messages[: starts[0]])
        for i, (index, end) in enumerate(zip(starts, ends, strict=False)):
            for d, mine in zip(found, samples, strict=True):
                step = await d.step(messages[index], messages[index + 1 : end], timed=i % every == 0)
                if step is not None:
                    mine[i].append(step)
    for d in found:
        await d.close()
    return [
        [
            (end, {k: statistics.median(s[k] for s in per_call) for k in per_call[0]})
            for end, per_call in zip(ends, mine, strict=True)
            if per_call
        ]
        for mine in samples
    ]


def whole(step: dict[str, float]) -> float:
    return sum(v for k, v in step.items() if k != CPU)


def tenths(values: Sequence[float]) -> tuple[float, float]:
    """Median ms over the first and the last tenth of the calls."""
    tenth = max(len(values) // 10, 1)
    return statistics.median(values[:tenth]) * 1e3, statistics.median(values[-tenth:]) * 1e3


def report(size: int, found: Sequence[Driver], results: Sequence[Samples]) -> None:
    calls = len(results[0])
    print(f"\n{size} messages ({calls} calls); early = first tenth of the timed calls, late = last tenth")
    header = f"{'library':42} {'counter':36} {'calls':>5} {'early ms':>9} {'late ms':>9} {'late/early':>10}"
    print(header)
    print("-" * len(header))
    for d, samples in zip(found, results, strict=True):
        early, late = tenths([whole(s) for _, s in samples])
        print(f"{d.name:42} {d.counter:36} {len(samples):5} {early:9.3f} {late:9.3f} {late / early:10.2f}")
    steps = ", ".join(f"{k} {tenths([s[k] for _, s in results[0]])[1]:.3f}" for k in STEPS)
    cpu = tenths([s[CPU] for _, s in results[0]])
    print(
        f"contextkeep late, per step (ms): {steps}; "
        f"CPU of the whole call early {cpu[0]:.3f}, late {cpu[1]:.3f}"
    )


def plot(path: Path, found: Sequence[Driver], results: Sequence[Samples]) -> None:
    """ms per call against the messages in the prompt, one line per library (rolling median)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    for d, samples in zip(found, results, strict=True):
        x, y = [n for n, _ in samples], [whole(s) * 1e3 for _, s in samples]
        half = max(len(y) // 100, 1)
        smooth = [statistics.median(y[max(i - half, 0) : i + half + 1]) for i in range(len(y))]
        ax.plot(x, smooth, label=d.name, linewidth=1.4)
    ax.set_yscale("log")
    ax.set_xlabel("messages in the prompt")
    ax.set_ylabel("ms per model call (rolling median)")
    ax.set_title("Work per model call (django-14997, rounds repeated)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"plot: {path} ({path.stat().st_size // 1024} KiB)")


async def profile(trajectory: Trajectory, top: int = 30) -> None:
    """contextkeep alone over one replay, its four timed steps under cProfile: calls per call, hot spots.

    With an encoder of its own: the replays before it must not have counted its texts already.
    """
    with tempfile.TemporaryDirectory(prefix="bench-calls-") as tmp:
        found, _ = drivers(trajectory, HFEncoder(DEEPSEEK_TOKENIZER), Path(tmp), with_anchors=False)
        with profiling() as profiler:
            (samples,) = await replay(trajectory, found, 1, 1)
    stats = pstats.Stats(profiler)
    total: int = stats.total_calls  # type: ignore[attr-defined]  # set by Stats, missing from typeshed
    print(
        f"\ncontextkeep alone at {len(trajectory.messages)} messages under cProfile: "
        f"{total / len(samples):.0f} function calls per call "
        f"(record + add + prepare + view.messages, mean over {len(samples)} calls)"
    )
    stats.sort_stats("tottime").print_stats(top)


async def main_async(args: argparse.Namespace) -> None:
    (base,) = load_trajectories(args.trajectory)
    encoder = HFEncoder(DEEPSEEK_TOKENIZER)
    print(
        f"trajectory: {args.trajectory.name}; repeat {args.repeat}; contextkeep step = record + add + "
        "prepare + view.messages; anchors: their per-call check"
    )
    last: tuple[list[Driver], list[Samples]] | None = None
    notes: list[str] = []
    for size in args.sizes:
        trajectory = base if size <= len(base.messages) else lengthened(base, size)
        with tempfile.TemporaryDirectory(prefix="bench-calls-") as tmp:
            found, notes = drivers(trajectory, encoder, Path(tmp), with_anchors=not args.no_anchors)
            results = await replay(trajectory, found, args.repeat, args.anchor_calls)
        report(len(trajectory.messages), found, results)
        last = (found, results)
    print(machine_line())
    print("targets: contextkeep late <= 0.15 ms at 261 messages, late/early <= 1.3, <= 0.2 ms at 10,000")
    for note in notes:
        print(f"note: {note}")
    if args.plot and last is not None:
        plot(args.plot, *last)
    if args.profile:
        size = args.sizes[0]
        await profile(base if size <= len(base.messages) else lengthened(base, size))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trajectory", type=Path, default=TRAJECTORY)
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[261, 1001, 2501, 10000]
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="replays per size; medians per call are reported"
    )
    parser.add_argument(
        "--anchor-calls", type=int, default=500, help="calls per size at which each anchor is timed"
    )
    parser.add_argument(
        "--plot", type=Path, help="write ms per call vs messages (the largest size) to this PNG"
    )
    parser.add_argument("--memory", action="store_true", help="also measure RSS and a history's RAM")
    parser.add_argument(
        "--profile", action="store_true", help="also print contextkeep's function calls per call"
    )
    parser.add_argument(
        "--no-anchors", action="store_true", help="time contextkeep alone (a quick loop while optimising)"
    )
    args = parser.parse_args()
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tokenizers"))
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    asyncio.run(main_async(args))
    if args.memory:
        memory_report()


if __name__ == "__main__":
    main()
