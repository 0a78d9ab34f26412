"""SDK clients closed when the test ends: a client left to the garbage collector leaks its sockets."""

from __future__ import annotations

import inspect
from typing import Protocol, TypeVar


class Closable(Protocol):
    """A client with `close()`, sync (`openai.OpenAI`) or async (`openai.AsyncOpenAI`)."""

    def close(self) -> object:
        """Release the client's connections (a coroutine for async clients)."""


ClientT = TypeVar("ClientT", bound=Closable)

_OPENED: list[Closable] = []


def closing(client: ClientT) -> ClientT:
    """`client`, closed when the test ends (the `close_clients` fixture in conftest)."""
    _OPENED.append(client)
    return client


async def close_opened() -> None:
    """Close every client `closing` registered, async ones in the test's own event loop."""
    while _OPENED:
        closed = _OPENED.pop().close()
        if inspect.isawaitable(closed):
            await closed
