"""Fixtures for the LangChain middleware tests: the events a test collects, what it opened (closed after)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from contextkeep._events import Event
from contextkeep._manager import ContextManager
from contextkeep.integrations.langchain import ContextKeepMiddleware


@pytest.fixture
def events() -> list[Event]:
    return []


@pytest.fixture
async def opened() -> AsyncIterator[list[ContextManager | ContextKeepMiddleware]]:
    """Managers and middlewares a test opened, closed after it."""
    items: list[ContextManager | ContextKeepMiddleware] = []
    yield items
    for item in reversed(items):
        if isinstance(item, ContextKeepMiddleware):
            item.close()
        else:
            await item.close()
