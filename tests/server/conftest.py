"""Fixtures of the server tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer
from support.browser import chromium
from support.proxy_fixtures import StartProxy, served_proxy


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium (the dashboard's browser tests)."""
    yield from chromium()


@pytest.fixture
def start_proxy(tmp_path: Path) -> Iterator[StartProxy]:
    """`start_proxy(upstream, **settings)`: starts `upstream` and the proxy in front of it, both stopped at the end.

    `settings` are `support.proxy_fixtures.proxy_settings`'s fields. Several proxies may share one upstream;
    every proxy stops before its upstream.
    """
    upstreams: list[FakeLLMServer] = []
    with ExitStack() as running:

        def start(upstream: FakeLLMServer, **settings: Any) -> BackgroundServer:
            if upstream not in upstreams:
                upstreams.append(running.enter_context(upstream))
            return running.enter_context(served_proxy(tmp_path, upstream, **settings))

        yield start
