"""Per-call token counting cost as a conversation grows: contextkeep's cached counter vs re-encoding.

Replays the longest shared trajectory call by call. For each call it times
(a) contextkeep's `PromptCounter.count_prompt` (cached per message, incremental) and
(b) re-encoding the whole prompt with tiktoken, as a counter without a cache does.
It prints the median cost over the first and the last tenth of the calls, then how fast
DeepSeek's `tokenizer.json` encodes every text of the shared trajectories through `tokenizers`
itself and through `HFEncoder` (which splits the text itself, with the same counts).

    TIKTOKEN_CACHE_DIR=../shared/tokenizers python benchmarks/bench_counting.py [--trajectory P] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from _bench_machine import machine_line

from contextkeep._formats import to_openai
from contextkeep._messages import Message
from contextkeep._tokens import HFEncoder, OpenAIFraming, PromptCounter, TiktokenEncoder, counter_for_model
from contextkeep.replay.trajectories import load_trajectories

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def longest() -> Path:
    files = sorted((SHARED / "trajectories" / "mini-swe-agent").glob("*.traj.json"))
    return max(files, key=lambda p: len(load_trajectories(p)[0].calls))


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--trajectory", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=5, help="replays per counter (median per call)")
    args = parser.parse_args()
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tokenizers"))
    path = args.trajectory or longest()
    (trajectory,) = load_trajectories(path)
    prompts = [trajectory.messages[: c.index] for c in trajectory.calls]
    tiktoken_encoder = TiktokenEncoder("o200k_base")
    deepseek = SHARED / "tokenizers" / "deepseek_tokenizer.json"

    counters: dict[str, Callable[[], PromptCounter]] = {
        "contextkeep tiktoken (cached)": lambda: PromptCounter(tiktoken_encoder, OpenAIFraming()),
        "contextkeep heuristic (cached)": lambda: counter_for_model(trajectory.model, "heuristic"),
    }
    if deepseek.exists():
        counters["contextkeep deepseek tokenizer.json (cached)"] = lambda: counter_for_model(
            trajectory.model, HFEncoder(deepseek)
        )

    def reencode(prompt: list[Message]) -> int:  # what a counter without a cache does every call
        return sum(tiktoken_encoder.count(json.dumps(m, ensure_ascii=False)) for m in to_openai(prompt))

    rows = []
    per_call: list[list[float]]
    for name, factory in counters.items():
        per_call = [[] for _ in prompts]
        for _ in range(args.repeat):
            counter = factory()
            for i, prompt in enumerate(prompts):
                t0 = time.perf_counter()
                counter.count_prompt(prompt, trajectory.tools)
                per_call[i].append(time.perf_counter() - t0)
        rows.append((name, [statistics.median(c) for c in per_call]))
    per_call = [[] for _ in prompts]
    for _ in range(args.repeat):
        for i, prompt in enumerate(prompts):
            t0 = time.perf_counter()
            reencode(prompt)
            per_call[i].append(time.perf_counter() - t0)
    rows.append(("re-encode whole prompt with tiktoken", [statistics.median(c) for c in per_call]))

    tenth = max(len(prompts) // 10, 1)
    print(f"trajectory: {path.name}  calls: {len(prompts)}  messages at the last call: {len(prompts[-1])}")
    print(f"{'counter':48} {'early ms':>9} {'late ms':>9} {'late/early':>10} {'late vs re-encode':>18}")
    reencode_late = statistics.median(rows[-1][1][-tenth:])
    for name, costs in rows:
        early, late = statistics.median(costs[:tenth]), statistics.median(costs[-tenth:])
        ratio = reencode_late / late
        print(f"{name:48} {early * 1e3:9.3f} {late * 1e3:9.3f} {late / early:10.2f} {ratio:17.1f}x")

    if deepseek.exists():
        encoder_throughput(deepseek, args.repeat)


def encoder_throughput(path: Path, repeat: int) -> None:
    """MB/s over every message text and tool-call argument of the shared trajectories (best of `repeat`)."""
    from tokenizers import Tokenizer

    texts = [
        t
        for p in sorted((SHARED / "trajectories").glob("*/*.traj*"))
        for trajectory in load_trajectories(p)
        for m in trajectory.messages
        for t in (m.text, *(c.arguments for c in m.tool_calls))
        if t
    ]
    megabytes = sum(len(t.encode()) for t in texts) / 1e6
    reference = Tokenizer.from_file(str(path))
    warm = HFEncoder(path)

    def rate(setup: Callable[[], Callable[[str], object]]) -> float:
        seconds = []
        for _ in range(repeat):
            count = setup()  # not timed
            t0 = time.perf_counter()
            for t in texts:
                count(t)
            seconds.append(time.perf_counter() - t0)
        return megabytes / min(seconds)

    def encode(text: str) -> object:
        return reference.encode(text, add_special_tokens=False)

    rows = [
        ("tokenizers, Tokenizer.encode", rate(lambda: encode)),
        ("HFEncoder, first time (new encoder)", rate(lambda: HFEncoder(path).count)),
        ("HFEncoder, pieces seen before", rate(lambda: warm.count)),
    ]
    print(f"\nDeepSeek tokenizer.json over {len(texts)} trajectory texts ({megabytes:.1f} MB):")
    for name, mb_s in rows:
        print(f"  {name:38} {mb_s:6.2f} MB/s")
    print(machine_line())


if __name__ == "__main__":
    main()
