"""HTTP plumbing: a threaded stdlib server that hands parsed requests to an application."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from contextkeep.testing._render import SSEEvent

__all__ = ["App", "HTTPResponse", "ThreadedServer"]


@dataclass(frozen=True)
class HTTPResponse:
    """A JSON answer, or a server-sent event stream when `events` is set."""

    status: int = 200
    """HTTP status code."""
    body: Any = None
    """JSON body; a `str` is sent as plain text."""
    events: Iterable[SSEEvent] | None = None
    """Server-sent events, written and flushed one by one."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers."""


App = Callable[[str, str, Any, dict[str, str]], HTTPResponse]
"""(method, path, parsed JSON body or None, lower-cased headers) → response."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as SDK connection pools expect
    disable_nagle_algorithm = True  # headers and body go out in separate writes: avoid 40 ms stalls
    server: ThreadedServer

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: tests read recorded requests, not access logs."""

    def _dispatch(self, method: str) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            response = self.server.app(method, urlsplit(self.path).path, body, headers)
        except Exception as exc:  # a bug in a responder must reach the test, not hang it
            error = {"message": f"fake server error: {exc!r}", "type": "server_error"}
            response = HTTPResponse(500, {"error": error})
        # The client may have given up (timeouts); a broken pipe then is expected.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._write(response)

    def _write(self, response: HTTPResponse) -> None:
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        if response.events is not None:
            self._write_events(response.events)
            return
        is_text = isinstance(response.body, str)
        payload = response.body.encode() if is_text else json.dumps(response.body).encode()
        self.send_header("Content-Type", "text/plain" if is_text else "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _write_events(self, events: Iterable[SSEEvent]) -> None:
        # No length is known up front, so the stream ends by closing the connection.
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for name, data in events:
            prefix = f"event: {name}\n" if name else ""
            text = data if isinstance(data, str) else json.dumps(data)
            self.wfile.write(f"{prefix}data: {text}\n\n".encode())
            self.wfile.flush()


class ThreadedServer(ThreadingHTTPServer):
    """Listens on 127.0.0.1 with an ephemeral port; one daemon thread per connection."""

    daemon_threads = True
    request_queue_size = 128  # the default 5 drops bursts of concurrent async requests

    def __init__(self, app: App) -> None:
        self.app = app
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def port(self) -> int:
        """The port the OS assigned."""
        return int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Connections closed by stop() or by clients that timed out are expected; report the rest."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """End idle keep-alive connections so their threads exit and clients reconnect."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
