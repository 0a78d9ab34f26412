"""Load+save throughput of every store backend (a script, not a test).

Each operation is what the engine does after a compaction: load a document,
then compare-and-set save it, retrying on conflict. Writers run as coroutines
sharing one store instance, either all on one conversation (contention: most
saves lose the race and retry) or each on its own conversation.

    .venv/bin/python benchmarks/bench_stores.py --seconds 2
    .venv/bin/python benchmarks/bench_stores.py --backends sqlite,redis --writers 1,8,32
    .venv/bin/python benchmarks/bench_stores.py --calls 300 --backends memory,sqlite

`--calls N` measures instead what a store adds to a whole model call: an agent loop of N
steps (record the reply with its usage, add the tool result, prepare, `view.messages`) on
one session, each backend's median ms per call beside the in-memory store's, in one run.

Unreachable servers are skipped with a note. Everything written goes under a
fresh table / key prefix that is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from contextkeep import ContextManager, ModelSpec, Usage
from contextkeep._errors import ContextKeepError
from contextkeep.stores import RedisStore, SQLStore, Store, open_store

DEFAULT_URLS = {
    "memory": "memory://",
    "sqlite": "sqlite:///{tmp}/bench.db",
    "postgresql": "postgresql://postgres@127.0.0.1:5432/test",
    "mariadb": "mysql://root@127.0.0.1:3306/test",
    "redis": "redis://127.0.0.1:6379/0",
}


async def _writer(store: Store, conversation: str, writer: int, deadline: float) -> tuple[int, int]:
    """Load+CAS-save until the deadline; (successful saves, lost races)."""
    saved = conflicts = 0
    while time.perf_counter() < deadline:
        doc = await store.load_document(conversation, "bench")
        data = {"count": int(doc.data.get("count", 0)) + 1, "writer": writer}
        if await store.save_document(conversation, "bench", data, expected_version=doc.version):
            saved += 1
        else:
            conflicts += 1
        await asyncio.sleep(0)  # the memory store never suspends: let the other writers run
    return saved, conflicts


async def _cell(store: Store, writers: int, shared: bool, seconds: float) -> tuple[float, float]:
    """Successful load+save pairs per second, and lost races per second."""
    run = uuid.uuid4().hex[:8]
    conversations = [f"bench-{run}" if shared else f"bench-{run}-{w}" for w in range(writers)]
    start = time.perf_counter()
    results = await asyncio.gather(
        *(_writer(store, conversations[w], w, start + seconds) for w in range(writers))
    )
    elapsed = time.perf_counter() - start
    saved = sum(r[0] for r in results)
    # Every save must be counted in the documents: a lost update would show here.
    stored = sum([(await store.load_document(c, "bench")).data.get("count", 0) for c in set(conversations)])
    assert stored == saved, f"lost updates: {saved} saves but the documents count {stored}"
    return saved / elapsed, sum(r[1] for r in results) / elapsed


async def _bench_backend(name: str, url: str, writer_counts: list[int], seconds: float) -> list[str]:
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    param = "key_prefix" if name == "redis" else "table_prefix"
    if name != "memory":
        url += f"{'&' if '?' in url else '?'}{param}={prefix}{':' if name == 'redis' else '_'}"
    store = open_store(url)
    rows: list[str] = []
    try:
        try:
            await asyncio.wait_for(store.count_messages("probe"), 5)
        except (ContextKeepError, TimeoutError) as exc:
            return [f"{name:<11} skipped: {type(exc).__name__}: {str(exc)[:90]}"]
        for writers in writer_counts:
            for shared in (True, False):
                ops, conflicts = await _cell(store, writers, shared, seconds)
                where = "one" if shared else "distinct"
                rows.append(f"{name:<11} {writers:>7} {where:>13} {ops:>10,.0f} {conflicts:>12,.0f}")
    finally:
        if isinstance(store, SQLStore):
            await store.drop_tables()
        elif isinstance(store, RedisStore):
            await store.delete_keys()
        await store.close()
    return rows


def _reply(step: int) -> dict[str, Any]:
    arguments = json.dumps({"command": f"ls {step}"})
    call = {"id": f"c{step}", "type": "function", "function": {"name": "bash", "arguments": arguments}}
    return {"role": "assistant", "content": f"step {step}", "tool_calls": [call]}


async def _calls(url: str, steps: int, tmp: str) -> list[float]:
    """Seconds per whole call of an agent loop on `url` (warm-up steps dropped)."""
    cm = ContextManager(
        ModelSpec("bench", 1_000_000), store=url, workspace=f"{tmp}/ws", tokenizer="heuristic"
    )
    seconds: list[float] = []
    try:
        async with cm.session(f"calls-{uuid.uuid4().hex[:8]}") as s:
            await s.add([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "go"}])
            await s.prepare()
            for step in range(steps):
                start = time.perf_counter()
                await s.record(_reply(step), Usage(input_tokens=100 + step, output_tokens=10))
                await s.add([{"role": "tool", "tool_call_id": f"c{step}", "content": f"out {step} " * 8}])
                _ = (await s.prepare()).messages
                seconds.append(time.perf_counter() - start)
    finally:
        await cm.close()
    return seconds[min(20, steps // 5) :]


async def _bench_calls(names: list[str], urls: dict[str, str], steps: int, rounds: int = 3) -> None:
    """Median ms per call for each backend, rounds interleaved so load drifts hit all alike."""
    samples: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(rounds):
            for name in names:
                url = urls[name].replace("{tmp}", tmp).replace("bench.db", f"calls{n}.db")
                samples[name] += await _calls(url, steps, tmp)
    base = statistics.median(samples["memory"]) if "memory" in samples else None
    print(f"whole call (record + add + prepare + view.messages), {steps} steps x {rounds} rounds")
    print(f"{'backend':<11} {'median ms':>10} {'p90 ms':>8} {'added ms':>9}")
    for name, values in samples.items():
        median, p90 = statistics.median(values), sorted(values)[int(len(values) * 0.9)]
        added = "" if base is None else f"{(median - base) * 1e3:9.3f}"
        print(f"{name:<11} {median * 1e3:10.3f} {p90 * 1e3:8.3f} {added}", flush=True)


async def main() -> None:
    """Run every requested cell and print the table."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of each cell (default 1)")
    parser.add_argument("--backends", default=",".join(DEFAULT_URLS), help="comma-separated backend names")
    parser.add_argument("--writers", default="1,8", help="comma-separated concurrent writer counts")
    for name, url in DEFAULT_URLS.items():
        if name != "memory":
            parser.add_argument(f"--{name}-url", default=url, help=f"{name} store URL")
    parser.add_argument("--calls", type=int, default=0, help="whole-call loop of N steps instead")
    args = parser.parse_args()
    if args.calls:
        names = args.backends.split(",")
        urls = {n: getattr(args, f"{n}_url", DEFAULT_URLS[n]) for n in names}
        await _bench_calls(names, urls, args.calls)
        return
    writer_counts = [int(w) for w in args.writers.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"load+CAS-save pairs per second, {args.seconds:g} s per cell; conflicts = lost races/s")
        print(f"{'backend':<11} {'writers':>7} {'conversations':>13} {'ops/s':>10} {'conflicts/s':>12}")
        for name in args.backends.split(","):
            url = getattr(args, f"{name}_url", DEFAULT_URLS[name]).replace("{tmp}", str(Path(tmp)))
            for row in await _bench_backend(name, url, writer_counts, args.seconds):
                print(row, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
