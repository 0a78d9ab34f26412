"""The latency `contextkeep serve --upstream` adds per call, as the re-sent history grows.

An agent re-sends its whole history on every call. For each history length, one agent
loop runs through the proxy: every call appends the proxy's last reply and a ~1 KB
message. Each body is also sent straight to the same fake upstream, in the same run, so
the difference is the proxy's own time: parsing, finding what is new, budgeting, storing,
the second HTTP hop. The proxy runs in a process of its own (as `contextkeep serve`
does), counts with tiktoken `o200k_base` and stores in SQLite; the upstream counts
tokens cheaply (bytes / 4) so it stays out of the figures. The proxy's parse step is
timed on its own, in this process, as the proxy runs it (`ClientMemory.parsed`: only what
follows the history the client's last body sent, when the body repeats it byte for byte),
and the added latency without it is its own column; orjson parsing the whole body, as it
would without that, is shown for comparison.

The same bodies also go through a bare forwarder in a third process: the same uvicorn
configuration in, the same httpx client out, nothing else. What it adds over direct is the
cost of the two HTTP hops themselves, which grows with the bytes every call carries;
"added − forwarder" is what contextkeep does on top of them. On Linux each process's CPU
time per call (every thread, from `/proc`) is reported too: it moves far less than the
latencies when other work competes for the cores.

    pip install -e '.[dev]'
    TIKTOKEN_CACHE_DIR=../shared/tokenizers python benchmarks/bench_proxy.py [--sizes 50,200,500,1000]
        [--calls 30] [--store memory://]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from _bench_machine import machine_line

from contextkeep.server._incoming import ClientMemory
from contextkeep.testing import FakeLLMServer

WINDOW = 4_000_000
"""Large enough that no compaction runs: the view is the whole history, as the direct call sends."""

SERVE = """
import sys, uvicorn
from contextkeep.server import ServerSettings, create_app
from contextkeep.server.connections import uvicorn_config
upstream, store, workspace, port = sys.argv[1:5]
settings = ServerSettings(store=store, workspace=workspace, upstream=upstream, model="bench-model",
                          window=int(sys.argv[5]), tokenizer="tiktoken:o200k_base")
uvicorn.Server(uvicorn_config(create_app(settings), "127.0.0.1", int(port), log_level="warning")).run()
"""
"""The proxy's process: `contextkeep serve` (its uvicorn configuration) with the tokenizer named."""

FORWARD = """
import sys, httpx, uvicorn
from contextkeep.server.connections import DEFAULT_HEADER_TIMEOUT, head_deadline
upstream, port = sys.argv[1:3]
client = httpx.AsyncClient(base_url=upstream.rstrip("/") + "/", timeout=60)
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/health":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    answer = await client.post(scope["path"].removeprefix("/v1/"), content=b"".join(chunks),
                               headers={"content-type": "application/json"})
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": answer.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": answer.content})
http = head_deadline(DEFAULT_HEADER_TIMEOUT)  # the proxy's protocol class, as `uvicorn_config` picks it
uvicorn.Server(uvicorn.Config(app, "127.0.0.1", int(port), http=http, log_level="warning")).run()
"""
"""The floor under the proxy: the same two HTTP hops (uvicorn in, httpx out) doing nothing else."""


def cheap_count(body: Mapping[str, Any]) -> int:
    """The upstream's prompt count: bytes / 4, so tokenizing stays out of both timings."""
    return len(json.dumps(body.get("messages"))) // 4


def tool_output(step: int) -> str:
    return "\n".join(
        f"step {step} line {i}: worker {i % 7} processed batch {step * 100 + i}" for i in range(20)
    )


def history(n: int) -> list[dict[str, Any]]:
    """A system prompt, a task, then (assistant call, tool result) rounds up to `n` messages."""
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an operations agent. Read logs with bash."},
        {"role": "user", "content": "Find out why the workers are slow."},
    ]
    step = 0
    while len(out) < n:
        call = {"id": f"call_{step}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        out.append({"role": "assistant", "content": f"checking {step}", "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"call_{step}", "content": tool_output(step)})
        step += 1
    return out[:n] if out[n - 1]["role"] != "assistant" else out[: n - 1]


def cpu_seconds(pid: int) -> float | None:
    """Seconds of CPU every thread of process `pid` used so far (Linux `/proc`), `None` elsewhere."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9
    except (OSError, ValueError):
        return None


def timed(client: httpx.Client, url: str, raw: bytes, headers: Mapping[str, str]) -> tuple[float, Any]:
    start = time.perf_counter()
    response = client.post(url, content=raw, headers={"content-type": "application/json", **headers})
    elapsed = time.perf_counter() - start
    response.raise_for_status()
    return elapsed, response.json()


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def parse_times(memory: ClientMemory, raw: bytes) -> tuple[float, float]:
    """Seconds the proxy's parse step takes on `raw`, and orjson's on all of it.

    `memory` then holds `raw`'s messages, as the proxy's own does after the request.
    """
    start = time.perf_counter()
    chat = memory.parsed(raw)
    parse = time.perf_counter() - start
    memory.convert(chat.messages, raw)
    start = time.perf_counter()
    orjson.loads(raw)
    return parse, time.perf_counter() - start


@dataclass
class Target:
    """One process the bodies go through: its URL and pid, with the latencies and CPU it took."""

    url: str
    pid: int
    latency: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def post(self, client: httpx.Client, raw: bytes, headers: Mapping[str, str]) -> Any:
        before = cpu_seconds(self.pid)
        elapsed, reply = timed(client, self.url, raw, headers)
        after = cpu_seconds(self.pid)
        self.latency.append(elapsed)
        if before is not None and after is not None:
            self.cpu.append(after - before)
        return reply


def median_ms(values: list[float]) -> float | None:
    return ms(statistics.median(values)) if values else None


def measure(
    client: httpx.Client, upstream: str, proxy: Target, forwarder: Target, n: int, calls: int
) -> dict[str, Any]:
    messages = history(n)
    conversation = {"x-conversation-id": f"bench-{n}"}
    body = {"model": "bench-model", "messages": messages}
    memory = ClientMemory(conversation["x-conversation-id"])
    first = json.dumps(body).encode()
    parse_times(memory, first)
    _, reply = timed(client, proxy.url, first, conversation)  # stores the history
    timed(client, forwarder.url, first, {})  # its connection to the upstream, opened untimed
    messages.append(reply["choices"][0]["message"])
    messages.append({"role": "user", "content": tool_output(n)})
    direct, parse, whole = [], [], []
    for step in range(calls):
        raw = json.dumps(body).encode()
        parsed, loaded = parse_times(memory, raw)
        parse.append(parsed)
        whole.append(loaded)
        direct.append(timed(client, upstream, raw, {})[0])
        forwarder.post(client, raw, {})
        reply = proxy.post(client, raw, conversation)
        messages.append(reply["choices"][0]["message"])
        messages.append({"role": "user", "content": tool_output(n + step + 1)})
    added = [p - d for p, d in zip(proxy.latency, direct, strict=True)]
    hops = [f - d for f, d in zip(forwarder.latency, direct, strict=True)]
    return {
        "messages": n,
        "body_kb": round(len(json.dumps(body)) / 1024),
        "direct_ms": ms(statistics.median(direct)),
        "proxy_ms": ms(statistics.median(proxy.latency)),
        "added_median_ms": ms(statistics.median(added)),
        "added_p90_ms": ms(sorted(added)[int(0.9 * (len(added) - 1))]),
        "parse_ms": ms(statistics.median(parse)),
        "added_minus_parse_ms": ms(statistics.median(a - p for a, p in zip(added, parse, strict=True))),
        "whole_parse_ms": ms(statistics.median(whole)),
        "hops_ms": ms(statistics.median(hops)),
        "own_ms": ms(statistics.median(a - h for a, h in zip(added, hops, strict=True))),
        "proxy_cpu_ms": median_ms(proxy.cpu),
        "hops_cpu_ms": median_ms(forwarder.cpu),
    }


COLUMNS = {
    "messages": "messages",
    "body_kb": "body KB",
    "direct_ms": "direct ms",
    "proxy_ms": "through proxy ms",
    "added_median_ms": "added ms (median)",
    "added_p90_ms": "added ms (p90)",
    "parse_ms": "proxy's parse ms",
    "added_minus_parse_ms": "added − parse ms",
    "whole_parse_ms": "orjson, whole body ms",
    "hops_ms": "bare forwarder added ms",
    "own_ms": "added − forwarder ms",
    "proxy_cpu_ms": "proxy CPU ms",
    "hops_cpu_ms": "forwarder CPU ms",
}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS.values()) + " |", "|" + "---:|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[k]) for k in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


@contextmanager
def serving(script: str, args: list[str], port: int, health: str) -> Iterator[Target]:
    """`script` in a process of its own, on `port`, until the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + health, timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the process on port {port} did not start") from None
                time.sleep(0.2)
        yield Target(f"{url}/v1/chat/completions", proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def main(sizes: list[int], calls: int, store: str | None) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeLLMServer(model="bench-model", context_window=WINDOW, counter=cheap_count) as upstream,
        httpx.Client(timeout=60) as client,
    ):
        settings = [upstream.base_url, store or f"sqlite:///{Path(tmp) / 'ck.db'}", f"{tmp}/ws"]
        rows = []
        for n in sizes:
            # fresh processes per size, so every size starts from the same heap
            with (
                serving(SERVE, [*settings, "8791", str(WINDOW)], 8791, "/api/health") as proxy,
                serving(FORWARD, [upstream.base_url, "8792"], 8792, "/health") as forwarder,
            ):
                row = measure(client, f"{upstream.base_url}/chat/completions", proxy, forwarder, n, calls)
            print(row, flush=True)
            rows.append(row)
    print()
    print(machine_line())
    print(table(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,200,500,1000", help="history lengths, comma-separated")
    parser.add_argument("--calls", type=int, default=30, help="measured calls per history length")
    parser.add_argument(
        "--store", default=None, help="the proxy's store URL (default: SQLite in a temp folder)"
    )
    args = parser.parse_args()
    main([int(n) for n in args.sizes.split(",")], args.calls, args.store)
