"""The `backend` and `store` fixtures: every store test runs on each backend it names."""

from __future__ import annotations

import pytest

from contextkeep.stores import Store
from stores.store_backends import ALL, SERVERS, Backend, unreachable
from support import service_unavailable


@pytest.fixture(params=ALL)
async def backend(request, tmp_path):
    if request.param in SERVERS and (reason := unreachable(request.param)):
        service_unavailable(request.param, reason)
    b = Backend(request.param, tmp_path)
    yield b
    await b.cleanup()


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.open()
