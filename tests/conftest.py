"""Shared test setup: offline tokenizers and the fixtures every area uses (helpers live in `support`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support.clients import close_opened
from support.shared import require_shared, use_offline_tokenizers

use_offline_tokenizers()


@pytest.fixture(scope="session")
def deepseek_tokenizer() -> Path:
    """The DeepSeek tokenizer.json, or skip."""
    return require_shared("tokenizers", "deepseek_tokenizer.json")


@pytest.fixture(autouse=True)
async def close_clients() -> AsyncIterator[None]:
    """Close the SDK clients a test opened through `support.closing`, in the test's own loop."""
    yield
    await close_opened()
