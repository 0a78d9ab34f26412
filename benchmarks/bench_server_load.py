"""`contextkeep serve` under load and at rest: memory stays flat, an idle server does no work.

Two measurements of a real `contextkeep serve --upstream` process (SQLite store) in front of
the fake upstream (`contextkeep.testing.FakeLLMServer`, in this process):

* **load**: `--clients` threads send chat completions for `--seconds`, each request on a new
  conversation (`X-Conversation-Id`); the server's RSS is sampled every second and reported
  after the warm-up (`--warmup` seconds) and at the end.
* **idle**: the store is topped up to `--stored` conversations, the server restarted on it,
  and its CPU time measured over `--idle-seconds` with no client, then with one event stream
  following every conversation (the dashboard's).

    .venv/bin/python benchmarks/bench_server_load.py                     # 60 s, 16 clients, 5,000 stored
    .venv/bin/python benchmarks/bench_server_load.py --seconds 10 --clients 4 --stored 500
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from contextkeep._messages import Message
from contextkeep.stores import open_store
from contextkeep.testing import FakeLLMServer

_TICK = os.sysconf("SC_CLK_TCK")
_CHAT = {
    "model": "fake-model",
    "max_tokens": 32,
    "messages": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Say ok."},
    ],
}


def rss_mib(pid: int) -> float:
    """Resident set size of `pid`, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time `pid` used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """`contextkeep serve` in its own process until `stop()`."""

    def __init__(
        self, store: str, workspace: Path, upstream: str | None = None, options: tuple[str, ...] = ()
    ) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        exe = Path(sys.executable).with_name("contextkeep")
        command = [str(exe), "serve", "--port", str(self.port), "--store", store]
        command += ["--workspace", str(workspace), "--model", "fake-model", "--window", "4096"]
        if upstream:
            command += ["--upstream", upstream]
        command += options
        env = {**os.environ, "CONTEXTKEEP_HOME": str(workspace.parent / "home")}
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"contextkeep serve exited with {self.proc.returncode}")
            try:
                httpx.get(f"{self.url}/api/health", timeout=2)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError("contextkeep serve did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """Ask it to exit (Ctrl+C) and wait."""
        self.proc.send_signal(2)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class LoadResult:
    """What a load run measured."""

    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    rss: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since start, RSS MiB), one a second."""
    served: list[int] = field(default_factory=list)
    """Requests answered by each RSS sample."""

    def rss_at(self, at: float) -> float:
        """The first sample taken at or after `at` seconds (the last one if none)."""
        return next((mib for t, mib in self.rss if t >= at), self.rss[-1][1])


def load(server: Served, clients: int, seconds: float) -> LoadResult:
    """`clients` threads, one new conversation per request, for `seconds`; RSS sampled each second."""
    result = LoadResult()
    lock = threading.Lock()
    start = time.monotonic()
    deadline = start + seconds

    def client() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while time.monotonic() < deadline:
                answer = http.post(
                    "/v1/chat/completions", json=_CHAT, headers={"X-Conversation-Id": uuid.uuid4().hex}
                )
                with lock:
                    result.requests += 1
                    result.errors += answer.status_code != 200

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    while time.monotonic() < deadline:
        result.rss.append((time.monotonic() - start, rss_mib(server.proc.pid)))
        result.served.append(result.requests)
        time.sleep(1.0)
    for t in threads:
        t.join(60)
    result.rss.append((time.monotonic() - start, rss_mib(server.proc.pid)))
    result.served.append(result.requests)
    result.seconds = time.monotonic() - start
    return result


async def top_up(store_url: str, stored: int) -> int:
    """Add one-message conversations until the store holds `stored`; how many it holds."""
    store = open_store(store_url)
    try:
        have = len(await store.list_conversations())
        for i in range(have, stored):
            await store.append(f"idle-{i:06d}", [Message(role="user", content="hi")], expected_length=0)
        return len(await store.list_conversations())
    finally:
        await store.close()


def idle_cpu(server: Served, seconds: float) -> float:
    """CPU % (of one core) the server used over `seconds` with nothing asked of it."""
    before = cpu_seconds(server.proc.pid)
    time.sleep(seconds)
    return 100 * (cpu_seconds(server.proc.pid) - before) / seconds


def watched_cpu(server: Served, seconds: float) -> float:
    """CPU % while one event stream follows every conversation (an open dashboard)."""
    with httpx.stream("GET", f"{server.url}/api/events", timeout=httpx.Timeout(5, read=None)) as stream:
        lines = stream.iter_lines()  # kept: a dropped iterator closes the stream
        next(lines)  # subscribed
        time.sleep(2.0)  # the first pass reads every conversation once
        return idle_cpu(server, seconds)


def main() -> None:
    """Run both measurements and print the figures."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="load duration")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients")
    parser.add_argument("--warmup", type=float, default=None, help="seconds of warm-up (default: 1/3)")
    parser.add_argument("--stored", type=int, default=5_000, help="conversations in the store at rest")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="CPU measuring window at rest")
    parser.add_argument(
        "--max-conversations",
        type=int,
        default=None,
        help="the server's --max-conversations (default: its own)",
    )
    args = parser.parse_args()
    warmup = args.warmup if args.warmup is not None else args.seconds / 3
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(context_window=4_096) as upstream:
        store, workspace = f"sqlite:///{tmp}/bench.db", Path(tmp) / "ws"
        cap = ("--max-conversations", str(args.max_conversations)) if args.max_conversations else ()
        server = Served(store, workspace, upstream.base_url, cap)
        try:
            run = load(server, args.clients, args.seconds)
        finally:
            server.stop()
        start, end = run.rss_at(warmup), run.rss[-1][1]
        print(
            f"load: {args.clients} clients, {run.seconds:.0f} s, {run.requests} requests "
            f"({run.requests / run.seconds:.0f}/s, {run.errors} errors), a new conversation each"
        )
        print(
            f"  RSS after {warmup:.0f} s warm-up {start:.1f} MiB, at the end {end:.1f} MiB "
            f"({end - start:+.1f}), peak {max(m for _, m in run.rss):.1f} MiB"
        )
        step = max(1, len(run.rss) // 6)
        samples = [*list(zip(run.rss, run.served, strict=True))[::step], (run.rss[-1], run.served[-1])]
        print(
            "  RSS MiB by time (requests served): "
            + ", ".join(f"{t:.0f} s {mib:.1f} ({n})" for (t, mib), n in samples)
        )
        held = asyncio.run(top_up(store, args.stored))
        server = Served(store, workspace)
        try:
            time.sleep(2.0)  # startup settles
            print(
                f"idle with {held} stored conversations: CPU {idle_cpu(server, args.idle_seconds):.1f} % "
                f"with no client, {watched_cpu(server, args.idle_seconds):.1f} % with one dashboard open "
                f"({args.idle_seconds:.0f} s each)"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
