"""Per-call token counting cost as a conversation grows: contextkeep's cached counter vs re-encoding.

Replays the longest shared trajectory call by call. For each call it times
(a) contextkeep's `PromptCounter.count_prompt` (cached per message, incremental) and
(b) re-encoding the whole prompt with tiktoken, as a counter without a cache does.
It prints the median cost over the first and the last tenth of the calls.

    TIKTOKEN_CACHE_DIR=../shared/tokenizers python benchmarks/bench_counting.py [--trajectory P] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from contextkeep.formats import to_openai
from contextkeep.replay.trajectories import load_trajectories
from contextkeep.tokens import HFEncoder, OpenAIFraming, PromptCounter, TiktokenEncoder, counter_for_model

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

    counters: dict[str, object] = {
        "contextkeep tiktoken (cached)": lambda: PromptCounter(tiktoken_encoder, OpenAIFraming()),
        "contextkeep heuristic (cached)": lambda: counter_for_model(trajectory.model, "heuristic"),
    }
    if deepseek.exists():
        counters["contextkeep deepseek tokenizer.json (cached)"] = lambda: counter_for_model(
            trajectory.model, HFEncoder(deepseek)
        )

    def reencode(prompt: list) -> int:  # what a counter without a cache does every call
        return sum(tiktoken_encoder.count(json.dumps(m, ensure_ascii=False)) for m in to_openai(prompt))

    rows = []
    for name, factory in counters.items():
        per_call = [[] for _ in prompts]
        for _ in range(args.repeat):
            counter = factory()  # type: ignore[operator]
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


if __name__ == "__main__":
    main()
