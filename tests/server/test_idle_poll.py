"""The cross-process watcher reads only what open event streams follow, never the whole store per poll."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import httpx
import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep.server import ServerSettings, create_app
from contextkeep.server.background import BackgroundServer
from contextkeep.stores.memory import MemoryStore
from support import SSECollector

STORED = 2_000
INTERVAL = 0.02
SWEEP = 100  # the watcher's default turn size


class CountingStore:
    """A real store that counts the calls made to it, by method and conversation."""

    def __init__(self, inner: MemoryStore) -> None:
        self._inner = inner
        self.calls: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        method = getattr(self._inner, name)

        async def counted(*args, **kwargs):
            with self._lock:
                self.calls[(name, args[0] if args else "")] += 1
            return await method(*args, **kwargs)

        return counted

    def snapshot(self) -> Counter[tuple[str, str]]:
        with self._lock:
            return Counter(self.calls)


class Polls:
    """Counts the watcher's passes (each one starts by asking the hub what is watched)."""

    def __init__(self, hub) -> None:
        self.count = 0
        self._watched = hub.watched
        self._done = threading.Condition()
        hub.watched = self._counted

    def _counted(self):
        with self._done:
            self.count += 1
            self._done.notify_all()
        return self._watched()

    def wait(self, passes: int) -> None:
        """Wait until `passes` more polls started (so the previous one finished)."""
        with self._done:
            target = self.count + passes
            assert self._done.wait_for(lambda: self.count >= target, timeout=30), "the watcher stalled"


def seeded() -> CountingStore:
    inner = MemoryStore()

    async def fill() -> None:
        for i in range(STORED):
            await inner.append(f"c{i:04d}", [Message(role="user", content=f"hello {i}")], expected_length=0)

    asyncio.run(fill())
    return CountingStore(inner)


def since(store: CountingStore, before: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    return store.snapshot() - before


@pytest.mark.slow
def test_the_watcher_reads_nothing_when_nobody_watches_and_little_when_someone_does():
    store = seeded()
    manager = ContextManager(ModelSpec("fake-model", 4_096), store=store, tokenizer="heuristic")
    app = create_app(ServerSettings(poll_interval=INTERVAL), manager=manager)
    with BackgroundServer(app) as server:
        polls = Polls(app.state.ck.hub)
        polls.wait(2)
        idle = store.snapshot()
        polls.wait(20)
        assert since(store, idle) == Counter()  # no stream open: the store is not touched

        with SSECollector(f"{server.url}/api/conversations/c0007/events"):
            polls.wait(2)
            one = store.snapshot()
            polls.wait(10)
            touched = since(store, one)
            assert {conversation for _, conversation in touched} == {"c0007"}
            assert sum(touched.values()) <= 3 * 12  # three cheap reads per poll, nothing loaded

        with SSECollector(f"{server.url}/api/events") as everything:
            polls.wait(2)
            start = store.snapshot()
            polls.wait(10)
            checked = since(store, start)
            counts = sum(n for (method, _), n in checked.items() if method == "count_messages")
            assert counts <= SWEEP * 12  # a turn of the store per poll, not all 2,000
            assert checked[("load_messages", "c1234")] == 0  # unchanged conversations are not loaded
            # Another process writes a conversation nobody touched lately: its turn comes.
            asyncio.run(
                store._inner.append("c1234", [Message(role="assistant", content="hi")], expected_length=1)
            )
            everything.wait_for(lambda events: any(d["conversation_id"] == "c1234" for _, d in events))
        assert httpx.get(f"{server.url}/api/health").json()["ok"] is True
