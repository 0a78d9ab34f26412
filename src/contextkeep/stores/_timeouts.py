"""Bounds on every store call: connect, statement and pool-acquire timeouts.

A server that accepts connections but never answers (a black-holed network, a frozen host)
must not hang the agent: each call fails with `StoreError` once its bound has passed. For the
SQL drivers asyncio cancellation alone cannot do that: SQLAlchemy runs a connection's cleanup
(rollback, return to the pool) to completion even when cancelled, over the same dead link, and
psycopg answers a cancellation by sending the server a cancel request it then waits for. So a
:class:`Watchdog`, armed when a call checks a connection out of the pool and disarmed when it
is checked back in, shuts the connection's socket down at the deadline: every pending read
ends at once as a disconnect, the connection is invalidated, and the cleanup needs no round
trip. The checkout pings the connection under the same watchdog (SQLAlchemy's own pre-ping
would run before any bound applies); a stale one is replaced by a fresh connection.

The bounds are store URL query parameters, in seconds: `connect_timeout` (open a connection,
handshake included), `statement_timeout` (one store call once connected: every statement of
its transaction and the commit) and `pool_timeout` (wait for a free pooled connection, or, for an
in-memory SQLite database, for its single connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry

from contextkeep._errors import ConfigError

__all__ = ["DEFAULT_TIMEOUTS", "PARAMS", "Expired", "Timeouts", "Watchdog", "watch_checkouts", "watchdog_of"]

_WATCHDOG = "contextkeep.watchdog"
"""Key of the armed watchdog in a pool record's `record_info`."""

PARAMS = ("connect_timeout", "statement_timeout", "pool_timeout")
"""The URL query parameters :meth:`Timeouts.from_query` reads."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds each phase of a store call may take before it fails with `StoreError`."""

    connect: float = 10.0
    """Opening a connection (TCP and the protocol handshake)."""
    statement: float = 30.0
    """One call once connected: its statements and the commit."""
    pool: float = 10.0
    """Waiting for a free pooled connection (in-memory SQLite: for its single connection)."""

    @classmethod
    def from_query(cls, params: Mapping[str, str]) -> Timeouts:
        """The timeouts named in `params` (`connect_timeout=5` ...), the defaults for the others."""
        values: dict[str, float] = {}
        for name in PARAMS:
            if name in params:
                values[name.removesuffix("_timeout")] = _seconds(name, params[name])
        return cls(**values)

    @property
    def checkout(self) -> float:
        """A backstop on obtaining a connection: a pool wait, a ping, a reconnect after a stale one.

        Each part has its own bound; this one only ends a handshake no driver bounds (aiomysql's).
        """
        return self.pool + self.statement + 2 * self.connect


class Expired(Exception):
    """A phase of a store call outlived its bound (the store raises `StoreError` for it)."""

    def __init__(self, phase: str, seconds: float) -> None:
        super().__init__(phase, seconds)
        self.phase = phase
        """`connect`, `statement`, `waiting for the writer` or `waiting for the database lock`."""
        self.seconds = seconds
        """The bound that passed."""


DEFAULT_TIMEOUTS = Timeouts()
"""10 s to connect, 30 s per call, 10 s for a pooled connection."""


def _seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"store.{name}", f"{raw!r} is not a positive number of seconds")
    return value


def socket_of(driver_connection: Any) -> int | None:
    """The socket file descriptor under a psycopg or aiomysql connection (None when there is none)."""
    fileno = getattr(driver_connection, "fileno", None)  # psycopg
    if callable(fileno):
        return int(fileno())
    writer = getattr(driver_connection, "_writer", None)  # aiomysql keeps its stream writer private
    sock = writer.transport.get_extra_info("socket") if writer is not None else None
    return None if sock is None else int(sock.fileno())


class Watchdog:
    """Shuts a connection's socket down if the call using it outlives `seconds`.

    The descriptor is duplicated at once, so the socket shut down is this connection's even if
    the driver closed its own descriptor meanwhile and the number was reused.
    """

    def __init__(self, fd: int, seconds: float) -> None:
        self.fired = False
        """Whether the deadline passed (what failed afterwards failed because of it)."""
        self._sock = socket.socket(fileno=os.dup(fd))
        self._handle = asyncio.get_running_loop().call_later(seconds, self._fire)

    def _fire(self) -> None:
        self.fired = True
        with contextlib.suppress(OSError):  # already closed by the peer: the pending read ends anyway
            self._sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        """The call is over: disarm and let go of the duplicate."""
        self._handle.cancel()
        self._sock.close()


def watch_checkouts(engine: AsyncEngine, seconds: float) -> None:
    """Arm a :class:`Watchdog` of `seconds` over each use of a pooled connection of `engine`, pinged first."""

    def on_checkout(dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        fd = socket_of(dbapi_connection.driver_connection)
        if fd is None:
            return
        watchdog = Watchdog(fd, seconds)
        info = record.record_info
        assert info is not None  # a pooled record always has one
        info[_WATCHDOG] = watchdog
        try:
            cursor = dbapi_connection.cursor()
            cursor.execute("SELECT 1")
            cursor.close()
        except Exception as exc:
            del info[_WATCHDOG]
            watchdog.stop()
            if watchdog.fired:
                raise Expired("statement", seconds) from exc
            raise sa.exc.DisconnectionError(f"stale pooled connection: {exc!r}") from exc  # reconnect

    def on_checkin(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        watchdog = (record.record_info or {}).pop(_WATCHDOG, None)
        if watchdog is not None:
            watchdog.stop()

    event.listen(engine.sync_engine, "checkout", on_checkout)
    event.listen(engine.sync_engine, "checkin", on_checkin)


def watchdog_of(conn: AsyncConnection) -> Watchdog | None:
    """The watchdog armed over `conn`'s current use (None for a connection without a socket)."""
    info = conn.sync_connection.connection.record_info if conn.sync_connection else None
    found = (info or {}).get(_WATCHDOG)
    return found if isinstance(found, Watchdog) else None
