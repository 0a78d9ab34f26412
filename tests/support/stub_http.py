"""A tiny HTTP server of the test's own (a page elsewhere, a broken upstream) on a free loopback port."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["QuietHandler", "stub_server"]


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that does not log each request to stderr."""

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@contextmanager
def stub_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` served in a daemon thread; its base URL (`http://127.0.0.1:PORT`)."""
    http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{http.server_address[1]}"
    finally:
        http.shutdown()
        http.server_close()
        thread.join()
