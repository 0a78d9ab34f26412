"""The whole call in CPU instructions: a figure that does not move with the machine's speed.

Wall times on a shared VM move by ±40 % within minutes, so a change of a few per cent to the
per-call path cannot be told from noise by timing it. This counts the instructions instead, C
code included (the tokenizer, `re`, orjson), under valgrind's callgrind: the same replay as
`bench_calls.py` (contextkeep alone on django-14997, exact DeepSeek tokenizer, in-memory store),
once to warm the caches and once counted, where only the four steps of every call (`record`,
`add`, `prepare`, `view.messages`) are counted. Two runs of the same code agree to within 0.3 %.

How: the counted replay drives each step to completion inside `functools.reduce` (the in-memory
store never suspends), and callgrind collects only inside that C function
(`--toggle-collect=functools_reduce`); instrumentation is switched on (`callgrind_control`) just
before the counted replay, so the imports and the tokenizer's loading run at full speed. It needs
valgrind (`apt install valgrind`) and a CPython whose library keeps its symbols (pyenv's and
Debian's do). About 20 s at 261 messages, 40 s at 1,001.

    TIKTOKEN_CACHE_DIR=../shared/tokenizers python benchmarks/bench_instructions.py [--sizes 261,1001]

`--pythonpath DIR` counts another checkout's `src` (an A/B of two commits on the same machine).
`--pass-messages N` counts `bench_compaction`'s compaction passes at calls of up to N messages
instead (L1+L2+L3, instant summariser, every thread's instructions while a pass runs; about 35 s
at 150): the figure behind its "pass CPU". Switching the instrumentation on and off around a pass
is counted too, about 0.56 M instructions (measured around a function that does next to nothing),
the same for every commit compared.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

_CHILD, _PASSES = "--child", "--passes"
_CALLS = re.compile(r"^calls (\d+)$", re.M)
_COLLECTED = re.compile(r"Collected : (\d+)")


def _drive(step: Callable[[], Any]) -> Any:
    """Run `step` to completion synchronously (a coroutine that suspends is an error here)."""
    result = step()
    if not inspect.isawaitable(result):
        return result
    coroutine = result.__await__()
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("a step suspended: only a store that never waits can be counted")


async def _child(size: int) -> None:
    """Under callgrind: one warm-up replay, then one whose four steps per call are counted."""
    import bench_calls
    from _bench_subject import timed
    from bench_compaction import DEEPSEEK_TOKENIZER, TRAJECTORY, lengthened

    from contextkeep._tokens import HFEncoder
    from contextkeep.replay.trajectories import load_trajectories

    counting = False

    async def measured(step: Callable[[], Any]) -> tuple[float, Any]:
        if not counting:
            return await timed(step)
        return 0.0, functools.reduce(lambda _a, _b: _drive(step), (0, 0))

    bench_calls.measured = measured  # the four steps of `ContextKeepCalls.step` go through it
    (base,) = load_trajectories(TRAJECTORY)
    trajectory = base if size <= len(base.messages) else lengthened(base, size)
    encoder = HFEncoder(DEEPSEEK_TOKENIZER)
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        found, _ = bench_calls.drivers(trajectory, encoder, Path(tmp), with_anchors=False)
        await bench_calls.replay(trajectory, found, 1, 1)
        found, _ = bench_calls.drivers(trajectory, encoder, Path(tmp), with_anchors=False)
        _instrument("on")
        counting = True
        (samples,) = await bench_calls.replay(trajectory, found, 1, 1)
    print(f"calls {len(samples)}")


def _instrument(state: str) -> None:
    subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True, capture_output=True)


async def _passes_child(messages: int) -> None:
    """Under callgrind: `bench_compaction`'s passes at calls of up to `messages`, once to warm, once counted.

    Every thread's instructions are counted while a pass runs (the background writers' too), as
    `bench_compaction` takes the process's CPU time over it; a pass suspends, so it cannot be
    driven inside `functools.reduce`.
    """
    from _bench_subject import ContextKeep
    from bench_compaction import TRAJECTORY, calls_of, calls_up_to, compaction_passes, subjects

    from contextkeep.replay.trajectories import load_trajectories

    (trajectory,) = load_trajectories(TRAJECTORY)
    calls = calls_up_to(calls_of(trajectory), messages)
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        found, _ = subjects(trajectory, Path(tmp))
        subject = found[0]  # bench_compaction's first: contextkeep with DeepSeek's tokenizer.json
        if not isinstance(subject, ContextKeep) or not subject.counter.startswith("deepseek"):
            raise SystemExit("DeepSeek's tokenizer.json is missing from ../shared/tokenizers")
        await compaction_passes(subject, calls, 1)
        compact = subject.compact

        async def counted() -> Any:
            _instrument("on")
            try:
                return await compact()
            finally:
                _instrument("off")

        subject.compact = counted  # type: ignore[method-assign]
        await compaction_passes(subject, calls, 1)
    print(f"calls {len(calls)}")


def count(size: int, pythonpath: str | None, passes: bool = False) -> tuple[int, int]:
    """Instructions counted at `size` messages (the four steps per call, or each pass), and the calls."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            *([] if passes else ["--toggle-collect=functools_reduce"]),
            f"--callgrind-out-file={tmp}/callgrind.out",
            sys.executable,
            __file__,
            _PASSES if passes else _CHILD,
            str(size),
        ]
        run = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    calls, collected = _CALLS.search(run.stdout), _COLLECTED.search(run.stderr)
    if run.returncode or calls is None or collected is None:
        raise SystemExit(f"the counted run failed ({run.returncode}):\n{run.stdout}\n{run.stderr[-3000:]}")
    return int(collected.group(1)), int(calls.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[261])
    parser.add_argument("--pythonpath", help="count the contextkeep found here (a checkout's src)")
    parser.add_argument(
        "--pass-messages",
        type=int,
        metavar="N",
        help="count bench_compaction's passes at calls of up to N messages",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (apt install valgrind)")
    where = args.pythonpath or "this environment"
    if args.pass_messages:
        instructions, passes = count(args.pass_messages, args.pythonpath, passes=True)
        print(
            f"contextkeep from {where}: a pass (L1+L2+L3, instant summariser) at calls of up to "
            f"{args.pass_messages} messages, {instructions / passes / 1e6:.2f} M instructions per pass "
            f"({passes} passes, every thread)"
        )
        return
    print(f"contextkeep from {where}; the whole call = record + add + prepare + view.messages")
    for size in args.sizes:
        instructions, calls = count(size, args.pythonpath)
        print(
            f"{size} messages: {instructions / calls / 1e6:.3f} M instructions per call "
            f"({calls} calls, {instructions:,} in all)"
        )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in (_CHILD, _PASSES):
        sys.path.insert(0, str(Path(__file__).parent))
        asyncio.run((_child if sys.argv[1] == _CHILD else _passes_child)(int(sys.argv[2])))
    else:
        main()
