"""A TCP forwarder on loopback in front of a real server, with network faults to switch on.

It runs in the test's own event loop (the store under test is async too). Faults:

- :meth:`Proxy.black_hole`: the network stops answering. New connections are accepted and
  never answered; open ones stop forwarding in both directions (bytes are swallowed).
- :meth:`Proxy.cut_reply_after`: the next time a client sends `marker` (e.g. `COMMIT`), that
  request reaches the server, and the connection is closed when the server's reply comes, so
  the reply is lost after the server acted on it.
- :meth:`Proxy.heal`: forward again; connections held in the black hole are closed (their
  clients gave up on them).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

__all__ = ["Proxy"]


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter | None
    cut_pending: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def close(self) -> None:
        for writer in (self.client, self.server):
            if writer is not None:
                writer.close()


class Proxy:
    """Forwards 127.0.0.1:`port` (once started) to `target_port` on loopback."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        """The port clients connect to (after `start`)."""
        self.cuts = 0
        """Replies dropped by `cut_reply_after` so far."""
        self.accepted = asyncio.Event()
        """Set whenever a connection is accepted (cleared by the test)."""
        self._dark = False
        self._marker: bytes | None = None
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.close()
        tasks = [t for link in self._links for t in link.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> Proxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def black_hole(self) -> None:
        self._dark = True

    def cut_reply_after(self, marker: bytes) -> None:
        self._marker = marker

    def heal(self) -> None:
        self._dark = False
        for link in list(self._links):
            if link.server is None:
                link.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted.set()
        link = _Link(writer, None)
        self._links.add(link)
        try:
            if self._dark:  # accept, never answer
                with contextlib.suppress(ConnectionError):
                    while await reader.read(65536):
                        pass
                return
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            link.server = up_writer
            link.tasks = [
                asyncio.ensure_future(self._pump(link, reader, up_writer, upstream=True)),
                asyncio.ensure_future(self._pump(link, up_reader, writer, upstream=False)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            link.close()
            self._links.discard(link)

    async def _pump(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if self._dark:
                    continue  # swallowed: the far side never hears of it
                if not upstream and link.cut_pending:
                    link.cut_pending = False
                    self.cuts += 1
                    link.close()
                    return
                if upstream and self._marker is not None and self._marker in data:
                    self._marker, link.cut_pending = None, True
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            link.close()
