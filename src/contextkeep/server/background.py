"""Run the app with uvicorn in a background thread (tests, notebooks, scripts that embed the dashboard).

```python
with BackgroundServer(create_app(settings)) as server:
    print(server.url)            # http://127.0.0.1:<ephemeral port>
```
"""

from __future__ import annotations

import threading
import time
from types import FrameType, TracebackType
from typing import Self

import uvicorn
from fastapi import FastAPI

from contextkeep.server.connections import uvicorn_config

__all__ = ["BackgroundServer", "ContextServer"]


class ContextServer(uvicorn.Server):
    """uvicorn's server that ends the app's event streams first when asked to exit.

    Without it, open dashboards keep their streams, and a shutdown waits for them.
    """

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    def end_streams(self) -> None:
        """Close every server-sent-event stream (thread-safe)."""
        ck = getattr(self._app.state, "ck", None)
        if ck is not None:
            ck.hub.close()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """End the open event streams first, so the server does not wait on them to stop."""
        self.end_streams()
        super().handle_exit(sig, frame)


class BackgroundServer:
    """uvicorn serving `app` on `host` (an ephemeral port by default) until `stop()`."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, timeout: float = 10.0) -> None:
        config = uvicorn_config(
            app, host, port, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
        )
        self._server = ContextServer(config, app)
        self._thread = threading.Thread(target=self._server.run, name="contextkeep-serve", daemon=True)
        self._timeout = timeout
        self.host = host
        self.port = port

    def start(self) -> Self:
        """Start serving; returns once the socket listens and the app's startup ran."""
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Ask uvicorn to exit (open streams are closed) and wait for the thread."""
        self._server.end_streams()
        self._server.should_exit = True
        self._thread.join(self._timeout)

    @property
    def url(self) -> str:
        """Base URL, without a trailing slash."""
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
