"""For the server tests: read a server-sent-event stream in a thread."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

Event = tuple[str, dict[str, Any]]


class SSECollector:
    """Reads `url` (text/event-stream) in a daemon thread and keeps every event."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.events: list[Event] = []
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url, headers or {}), daemon=True)

    def __enter__(self) -> SSECollector:
        self._thread.start()
        assert self.ready.wait(10), "the event stream did not open"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(1)  # a daemon: it ends when the server closes the stream

    def _read(self, url: str, headers: dict[str, str]) -> None:
        try:
            self._consume(url, headers)
        except httpx.HTTPError:
            if not self._stop.is_set():  # the server closing the stream at shutdown is expected
                raise

    def _consume(self, url: str, headers: dict[str, str]) -> None:
        timeout = httpx.Timeout(5.0, read=20.0)
        with httpx.stream("GET", url, headers=headers, timeout=timeout) as response:
            kind = ""
            for line in response.iter_lines():
                self.ready.set()
                if self._stop.is_set():
                    return
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    self.events.append((kind, json.loads(line[5:])))

    def wait_for(self, predicate: Callable[[list[Event]], bool], timeout: float = 15.0) -> list[Event]:
        """Wait until `predicate(events)` holds; fail with what arrived otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(list(self.events)):
                return list(self.events)
            time.sleep(0.05)
        raise AssertionError(f"events never matched; got {[t for t, _ in self.events]}")


def types(events: list[Event]) -> list[str]:
    """The event types, in order."""
    return [t for t, _ in events]
