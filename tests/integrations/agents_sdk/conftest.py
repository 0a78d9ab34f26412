"""Fixtures for the OpenAI Agents SDK tests (`support.openai_agents_harness`): managers, DeepSeek's counter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._manager import ContextManager
from contextkeep._tokens import counter_for_model
from support.openai_agents_harness import MAX_OUTPUT, WINDOW


@pytest.fixture
async def manager(deepseek_tokenizer: Path) -> AsyncIterator[Callable[..., ContextManager]]:
    """Opens managers on a SQLite store with the exact DeepSeek tokenizer; closes them after the test."""
    opened: list[ContextManager] = []

    def open_manager(store: Path, config: ContextConfig | None = None) -> ContextManager:
        spec = ModelSpec("deepseek-chat", context_window=WINDOW, max_output_tokens=MAX_OUTPUT)
        cm = ContextManager(
            spec,
            store=f"sqlite:///{store}",
            workspace=store.parent / "workspace",
            tokenizer=f"hf:{deepseek_tokenizer}",
            config=config,
        )
        opened.append(cm)
        return cm

    yield open_manager
    for cm in opened:
        await cm.close()


@pytest.fixture
def counter(deepseek_tokenizer: Path) -> Any:
    """The provider's exact DeepSeek counter."""
    return counter_for_model("deepseek-chat", f"hf:{deepseek_tokenizer}")
