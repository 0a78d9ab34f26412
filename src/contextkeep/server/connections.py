"""How uvicorn runs the app: a deadline on request heads, and no token in the access log.

uvicorn times out idle keep-alive connections but not a client that opens a connection
and sends its request head slowly (one byte now and then) or not at all: each such
connection is held for ever. :class:`HeadDeadlineProtocol` closes a connection whose
request head (request line and headers) is not complete `header_timeout` seconds after
it began (the connection opened, or the first byte of the next request arrived). It runs
on uvicorn's httptools (C) parser when httptools is installed (the server extra installs
it), h11's pure-Python one otherwise: a proxied request carries the client's whole
history, and h11 costs ~1 ms more per call at 500 messages.

The dashboard is opened once as ``/?token=TOKEN``; :class:`RedactTokens` replaces such
query values in uvicorn's access log with ``***``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

try:  # uvicorn's C-parser protocol, when httptools is installed (the server extra installs it)
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - a server installed without httptools
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

__all__ = ["HeadDeadlineProtocol", "RedactTokens", "uvicorn_config"]

logger = logging.getLogger("contextkeep.server")

_TOKEN_QUERY = re.compile(r"((?:^|[?&;])(?:token|access_token|api_key|key)=)[^&;\s]*", re.IGNORECASE)

DEFAULT_HEADER_TIMEOUT = 10.0


class _HeadDeadline(asyncio.Protocol):
    """Closes a connection whose request head is not complete `header_timeout` seconds after it began."""

    header_timeout = DEFAULT_HEADER_TIMEOUT
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    _deadline: asyncio.TimerHandle | None = None

    def _head_pending(self) -> bool:
        """Whether a request head began (or none came yet) and is not complete."""
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the deadline of the first request head."""
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Keep the deadline while the head is incomplete; lift it once the head is parsed."""
        super().data_received(data)
        if self._head_pending():
            self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the deadline with the connection."""
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            logger.warning("closed a connection whose request head took over %.1f s", self.header_timeout)
            self.transport.close()


class HeadDeadlineProtocol(_HeadDeadline, H11Protocol):
    """uvicorn's pure-Python h11 protocol with the request-head deadline (where httptools is missing)."""

    def _head_pending(self) -> bool:
        return self.conn.their_state is h11.IDLE


if HttpToolsProtocol is not None:

    class HeadDeadlineHttpTools(_HeadDeadline, HttpToolsProtocol):
        """uvicorn's httptools (C parser) protocol with the request-head deadline."""

        _in_head = False

        def on_message_begin(self) -> None:
            """A request's first byte arrived."""
            self._in_head = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            """Its head is complete."""
            self._in_head = False
            super().on_headers_complete()

        def _head_pending(self) -> bool:
            return self._in_head


def head_deadline(seconds: float) -> type[_HeadDeadline]:
    """The protocol class with `seconds` as its request-head deadline (httptools' parser when installed)."""
    base: type[_HeadDeadline] = HeadDeadlineProtocol if HttpToolsProtocol is None else HeadDeadlineHttpTools
    return type("HeadDeadline", (base,), {"header_timeout": seconds})


class RedactTokens(logging.Filter):
    """Replaces token-like query values (`token=`, `access_token=`, `key=`) in access-log records."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact the record's arguments in place; never drops a record."""
        if isinstance(record.args, tuple):
            record.args = tuple(_redact(a) for a in record.args)
        return True


def _redact(value: object) -> object:
    return _TOKEN_QUERY.sub(r"\1***", value) if isinstance(value, str) else value


def install_redaction() -> None:
    """Add :class:`RedactTokens` to uvicorn's access logger, once."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactTokens) for f in access.filters):
        access.addFilter(RedactTokens())


def uvicorn_config(app: FastAPI, host: str, port: int, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration for `app` with the limits its settings name (`app.state.settings`)."""
    settings = getattr(app.state, "settings", None)
    seconds = settings.header_timeout if settings is not None else DEFAULT_HEADER_TIMEOUT
    config = uvicorn.Config(app, host=host, port=port, http=head_deadline(seconds), **options)
    install_redaction()  # after uvicorn configured its loggers
    return config
