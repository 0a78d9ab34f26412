"""Waiting on a condition instead of sleeping a guessed time, and a clock a test moves by hand."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


async def wait_until(condition: Callable[[], bool | Awaitable[bool]], *, timeout: float = 10.0) -> None:
    """Poll `condition` (sync or async) until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        held = condition()
        if await held if inspect.isawaitable(held) else held:
            return
        assert time.monotonic() < deadline, f"condition still false after {timeout} s"
        await asyncio.sleep(0.005)


class TickingClock:
    """A stand-in for `time.perf_counter`: each read moves it 1 µs, `advance` moves it further.

    Durations measured with it are exact and never zero, whatever the machine's load.
    """

    TICK = 1e-6

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += self.TICK
        return self.now

    def advance(self, seconds: float) -> None:
        """Let `seconds` pass, as a slow operation would."""
        self.now += seconds
