"""Fixtures of the server tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.browser import chromium


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium (the dashboard's browser tests)."""
    yield from chromium()
