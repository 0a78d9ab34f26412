"""Per-call count-and-decide cost and one compaction pass: contextkeep vs AgentScope vs LangChain.

Replays the longest shared trajectory (mini-swe-agent django__django-14997, ~260 messages,
~55k tokens) call by call, driving every library on the same prompts, and prints two figures:

1. **Count-and-decide per call**: the work each library does before every model call when
   the window is large enough that nothing compacts. Median per call over `--repeat` replays,
   reported over the first and the last tenth of the calls. Between two checks the event loop
   idles twice (every library gets both): once standing for the model call, once, after the
   model's response is added, for the tools it asked for.
   - contextkeep: `await session.prepare(tools=...)`. Also printed, for late calls: the `add` of
     the messages before the call (ingest), and what contextkeep does in the two idle loops:
     it counts the masked previews of new tool outputs (`PromptCounter.warm`) while the model
     call is in flight, and counts the model's response while the tools run (`add` schedules it).
   - AgentScope 2.0: `await agent.compress_context()` under its trigger (it counts and returns).
   - LangChain 1.x: `SummarizationMiddleware.before_model(state, runtime)` under its trigger.
2. **One compaction pass** at late calls: the conversation is rebuilt up to the call, checked
   once and the loop idles (warm caches, as in a live session), then the window is set so the
   prompt sits at 85% of it (each library measured with its own counter) and one pass is timed.
   contextkeep's conversation is rebuilt, untimed, in a session that has that window from its
   start, as a live one would (layer 0 applied and counts cached as messages came, the tool
   outputs' workspace copies written). Median over the last tenth of the calls x `--repeat`,
   as wall time and as the process's CPU time; the same at the calls of up to
   `--pass-messages` (150) messages.
   - contextkeep: `await session.compress(...)` with thresholds lowered so that L1 (masking),
     L2 (dropping) and L3 (summary) all run; offloads go to a `LocalWorkspace` in a temp dir
     (one durable append per pass). `layers ms` is the same pass without waiting for the
     summariser or for I/O (`CompressionCompleted.layers_ms`): the figure the 2 ms target is for.
   - AgentScope: `await agent.compress_context()` over its 0.8 trigger (reserve 0.1 of the window).
   - LangChain: `before_model` with `trigger=("fraction", 0.8)` and the default `keep`.
No real LLM is called: the summariser (contextkeep `Summarizer`, AgentScope chat model,
LangChain chat model) is a stub that answers instantly; the time spent inside the stubs is
subtracted. Converting our messages into each library's types is never timed.

Run it in a separate environment that holds the comparison libraries (from the repo root):

    python -m venv .bench && .bench/bin/pip install -e . -r benchmarks/requirements-compare.txt
    TIKTOKEN_CACHE_DIR=../shared/tokenizers .bench/bin/python benchmarks/bench_compaction.py [--repeat N]

`--messages 2600 --calls-only` repeats the trajectory's rounds (tool call ids renamed) and measures
the per-call figure only, to see how it grows with a much longer history. A comparison library
that is not installed is skipped with a note (contextkeep alone still runs).
`--profile` prints cProfile hot spots of contextkeep's per-call and pass paths.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import io
import logging
import math
import os
import pstats
import statistics
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from _bench_anchors import AgentScope, LangChain
from _bench_machine import machine_line
from _bench_subject import HUGE_WINDOW, ContextKeep, Subject, profiling, timed

from contextkeep._events import CompressionCompleted
from contextkeep._tokens import HFEncoder, TiktokenEncoder, counter_for_model
from contextkeep.replay.trajectories import RecordedCall, Trajectory, load_trajectories

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRAJECTORY = SHARED / "trajectories" / "mini-swe-agent" / "django__django-14997.traj.json"
DEEPSEEK_TOKENIZER = SHARED / "tokenizers" / "deepseek_tokenizer.json"
PASS_FILL = 0.85
"""For a pass, the window is set so the prompt fills this share of it (over every default trigger)."""


# The benchmark --------------------------------------------------------------------------------


@dataclass
class Passes:
    """Timed compaction passes: wall seconds (stub time subtracted), CPU seconds, what the last did."""

    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    """The process's CPU time over the pass, every thread (the background writers' too)."""
    effect: str = ""


@dataclass
class Row:
    """One line of the table."""

    name: str
    counter: str
    per_call: list[float]
    passes: Passes
    """At late calls."""
    mid_passes: Passes | None
    """contextkeep: at the calls whose prompt holds about `--pass-messages` messages."""
    adds: list[float] = field(default_factory=list)
    """Seconds of `extend` (contextkeep: `add`, the ingest) before each call, medians per call."""
    during_call: list[float] = field(default_factory=list)
    """Seconds of the idle loop standing for the model call (contextkeep: the background warm-up)."""
    during_tools: list[float] = field(default_factory=list)
    """Seconds of the idle loop standing for the tools (contextkeep: the response counted ahead)."""
    completed: list[CompressionCompleted] = field(default_factory=list)
    """contextkeep: the timed passes' own reports."""


def calls_of(trajectory: Trajectory) -> list[int]:
    """Transcript index of each model call (its prompt is every message before it)."""
    return [c.index for c in trajectory.calls]


def calls_up_to(calls: Sequence[int], messages: int) -> list[int]:
    """The last tenth of the calls (as many as the late ones) whose prompt holds at most `messages`."""
    return [c for c in calls if c <= messages][-max(len(calls) // 10, 1) :]


@dataclass
class PerCall:
    """Seconds per call (medians over the replays)."""

    checks: list[float]
    """`check`, the figure compared across libraries."""
    adds: list[float]
    """`extend` before it (contextkeep: `add`, the ingest)."""
    during_call: list[float]
    """The idle loop after it, standing for the model call (contextkeep: the background warm-up)."""
    during_tools: list[float]
    """The idle loop after the response is added, standing for the tools (contextkeep: counting ahead)."""


async def replay_per_call(subject: Subject, calls: Sequence[int], repeat: int) -> PerCall:
    """Per call: `extend`, `check`, `idle` (the model), add the response, `idle` (the tools); timed."""
    messages = subject.trajectory.messages
    samples: list[list[list[float]]] = [[[] for _ in calls] for _ in range(4)]
    checks, adds, during_call, during_tools = samples
    for _ in range(repeat):
        await subject.open(HUGE_WINDOW)
        added = 0
        for i, index in enumerate(calls):
            adds[i].append((await timed(lambda: subject.extend(messages[added:index])))[0])  # noqa: B023
            checks[i].append((await timed(subject.check))[0])
            during_call[i].append((await timed(subject.idle))[0])
            await subject.extend(messages[index : index + 1])
            during_tools[i].append((await timed(subject.idle))[0])
            added = index + 1

    def medians(samples: list[list[float]]) -> list[float]:
        return [statistics.median(s) for s in samples]

    return PerCall(*map(medians, samples))


async def compaction_passes(subject: Subject, calls: Sequence[int], repeat: int) -> Passes:
    """One pass at each of `calls`, `repeat` times."""
    messages = subject.trajectory.messages
    out = Passes()
    for _ in range(repeat):
        for index in calls:
            await subject.open(HUGE_WINDOW)
            await subject.extend(messages[:index])
            before = await subject.tokens()  # also warms caches, as the checks before this call did
            await subject.idle()  # the model call that follows every check
            await subject.resize(math.ceil(before / PASS_FILL))
            cpu = time.process_time()
            took, result = await timed(subject.compact)
            out.cpu.append(time.process_time() - cpu)
            out.seconds.append(took)
            out.effect = f"{before} tok -> {await subject.describe(result)}"
    return out


async def memory_of_replay(subject: Subject, calls: Sequence[int]) -> tuple[float, float]:
    """tracemalloc peak and retained MiB over one replay (add + check per call)."""
    messages = subject.trajectory.messages
    tracemalloc.start()
    try:
        await subject.open(HUGE_WINDOW)
        added = 0
        for index in calls:
            await subject.extend(messages[added:index])
            await subject.check()
            added = index
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20, current / 2**20


async def profile(subject: Subject, calls: Sequence[int], mid: Sequence[int], top: int) -> str:
    """cProfile of the timed steps only: every `check` of one replay, then the late and the `mid` passes."""
    out = io.StringIO()
    for label, run in (
        ("prepare() over one replay (all calls)", lambda: replay_per_call(subject, calls, 1)),
        (
            "compress() passes at late calls",
            lambda: compaction_passes(subject, calls[-len(calls) // 10 :], 1),
        ),
        (
            f"compress() passes at calls of up to {max(mid, default=0)} messages",
            lambda: compaction_passes(subject, mid, 1),
        ),
    ):
        with profiling() as profiler:
            await run()
        out.write(f"\n--- contextkeep {subject.counter}: {label} ---\n")
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def subjects(trajectory: Trajectory, root: Path) -> tuple[list[Subject], list[str]]:
    """Every library that can run here, and a note for each one that cannot."""
    model = trajectory.model
    found: list[Subject] = []
    notes: list[str] = []
    if DEEPSEEK_TOKENIZER.exists():
        encoder = HFEncoder(DEEPSEEK_TOKENIZER)
        found.append(
            ContextKeep(
                trajectory, "deepseek tokenizer.json (exact)", lambda: counter_for_model(model, encoder), root
            )
        )
    else:
        notes.append(f"contextkeep exact: {DEEPSEEK_TOKENIZER} is missing")
    tiktoken = TiktokenEncoder("o200k_base")
    found.append(
        ContextKeep(trajectory, "tiktoken o200k_base", lambda: counter_for_model(model, tiktoken), root)
    )
    # The engine without a tokenizer's cost: what is left is contextkeep's own work.
    found.append(
        ContextKeep(trajectory, "heuristic (engine overhead)", lambda: counter_for_model(model), root)
    )
    comparisons: list[tuple[str, Callable[[], Subject]]] = [
        ("agentscope", lambda: AgentScope(trajectory)),
        ("langchain", lambda: LangChain(trajectory)),
        # The default trim (4000 tokens, start_on="human") leaves nothing to summarise in a
        # single-task agent run, so the model is never called; without it the summary path runs.
        ("langchain", lambda: LangChain(trajectory, trim_tokens_to_summarize=None)),
    ]
    for module, make in comparisons:
        if importlib.util.find_spec(module) is None:
            notes.append(f"{module} is not installed: skipped (see benchmarks/requirements-compare.txt)")
        else:
            found.append(make())
    return found, sorted(set(notes))


def ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1e3


def lengthened(trajectory: Trajectory, messages: int) -> Trajectory:
    """The trajectory with its rounds repeated (after the task) until it holds about `messages` messages.

    Each repetition renames its tool call ids, so every result still answers its own call.
    """
    head, body = trajectory.messages[:2], trajectory.messages[2 : trajectory.calls[-1].index]
    out = list(trajectory.messages[: trajectory.calls[-1].index])
    copy = 0
    while len(out) < messages:
        copy += 1
        for m in body:
            renamed = tuple(replace(c, id=f"{c.id}~{copy}") for c in m.tool_calls)
            answered = f"{m.tool_call_id}~{copy}" if m.tool_call_id else None
            out.append(replace(m, id=None, tool_calls=renamed, tool_call_id=answered))
    calls = [RecordedCall(i, None) for i, m in enumerate(out) if m.role == "assistant" and i >= len(head)]
    return replace(trajectory, messages=out, calls=calls)


async def main_async(args: argparse.Namespace) -> None:
    (trajectory,) = load_trajectories(args.trajectory)
    if args.messages:
        trajectory = lengthened(trajectory, args.messages)
    calls = calls_of(trajectory)
    tenth = max(len(calls) // 10, 1)
    mid = calls_up_to(calls, args.pass_messages)
    with tempfile.TemporaryDirectory(prefix="bench-compaction-") as tmp:
        found, notes = subjects(trajectory, Path(tmp))
        rows = []
        for subject in found:
            per_call = await replay_per_call(subject, calls, args.repeat)
            completed = subject.completed if isinstance(subject, ContextKeep) else []
            completed.clear()
            passes = (
                Passes(effect="not measured (--calls-only)")
                if args.calls_only
                else await compaction_passes(subject, calls[-tenth:], args.repeat)
            )
            late_completed = list(completed)
            mid_passes = (
                await compaction_passes(subject, mid, args.repeat)
                if isinstance(subject, ContextKeep) and not args.calls_only and mid
                else None
            )
            rows.append(
                Row(
                    subject.name,
                    subject.counter,
                    per_call.checks,
                    passes,
                    mid_passes,
                    per_call.adds,
                    per_call.during_call,
                    per_call.during_tools,
                    late_completed,
                )
            )
        memory = await memory_of_replay(found[0], calls)
        profiles = (
            [await profile(s, calls, mid, args.top) for s in found if isinstance(s, ContextKeep)]
            if args.profile
            else []
        )

    print(
        f"trajectory: {args.trajectory.name}  calls: {len(calls)}  messages at the last call: {calls[-1]}  "
        f"repeat: {args.repeat}"
    )
    print(
        f"early = median over calls 1..{tenth}; late = calls {len(calls) - tenth + 1}..{len(calls)}; "
        f"pass = median of {len(rows[0].passes.seconds)} passes at late calls (stub time subtracted)"
    )
    header = (
        f"{'library':18} {'counter':36} {'early ms':>9} {'late ms':>9} {'pass ms':>9} {'layers ms':>9}"
        f" {'pass CPU':>9}  pass (last one)"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        early, late = statistics.median(r.per_call[:tenth]), statistics.median(r.per_call[-tenth:])
        layers = f"{statistics.median(e.layers_ms for e in r.completed):9.3f}" if r.completed else f"{'-':>9}"
        passed, cpu = (f"{ms(v):9.3f}" if v else f"{'-':>9}" for v in (r.passes.seconds, r.passes.cpu))
        row = f"{r.name:18} {r.counter:36} {early * 1e3:9.3f} {late * 1e3:9.3f} {passed} {layers} {cpu}"
        print(f"{row}  {r.passes.effect}")
    print(
        "layers = the pass without waiting for the summariser or for I/O (CompressionCompleted.layers_ms); "
        "pass = the whole compress() call; pass CPU = the process's CPU time over it, every thread"
    )
    for r in rows:
        if r.mid_passes is not None:
            print(
                f"contextkeep ({r.counter}), pass at calls of up to {args.pass_messages} messages: "
                f"CPU {ms(r.mid_passes.cpu):.3f} ms, wall {ms(r.mid_passes.seconds):.3f} ms "
                f"({r.mid_passes.effect})"
            )
    for r in rows:
        if r.completed:
            offload = statistics.median(e.offload_ms for e in r.completed)
            print(
                f"contextkeep ({r.counter}), late calls: add() {ms(r.adds[-tenth:]):.3f} ms, "
                f"in the background: while the model call is in flight {ms(r.during_call[-tenth:]):.3f} ms, "
                f"while the tools run {ms(r.during_tools[-tenth:]):.3f} ms; "
                f"offload per pass (one durable append) {offload:.3f} ms"
            )
    print(
        f"contextkeep ({found[0].counter}) tracemalloc over one replay: "
        f"peak {memory[0]:.1f} MiB, retained {memory[1]:.1f} MiB"
    )
    print(machine_line())
    print("targets: contextkeep exact <= 0.3 ms per call (flat), <= 2 ms per pass without the LLM (layers)")
    for note in notes:
        print(f"note: {note}")
    if args.profile:
        for text in profiles:
            print(text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trajectory", type=Path, default=TRAJECTORY)
    parser.add_argument("--repeat", type=int, default=5, help="replays per library; medians are reported")
    parser.add_argument(
        "--messages", type=int, default=0, help="repeat the trajectory's rounds up to this many messages"
    )
    parser.add_argument(
        "--pass-messages", type=int, default=150, help="also time passes at calls of about this many messages"
    )
    parser.add_argument("--calls-only", action="store_true", help="skip the compaction passes")
    parser.add_argument("--profile", action="store_true", help="print contextkeep's cProfile hot spots")
    parser.add_argument("--top", type=int, default=25, help="rows per profile")
    args = parser.parse_args()
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tokenizers"))
    logging.disable(logging.WARNING)  # the libraries log every compaction at INFO/WARNING
    warnings.simplefilter("ignore")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
