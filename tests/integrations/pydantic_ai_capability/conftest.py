"""Fixtures for the pydantic-ai capability tests (`support.pydantic_ai_harness`): context managers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contextkeep import ContextManager
from support.pydantic_ai_harness import SPEC, Managers


@pytest.fixture
async def managers(tmp_path: Path, deepseek_tokenizer: Path) -> AsyncIterator[Managers]:
    opened: list[ContextManager] = []

    def open_manager(store: str | None = None) -> ContextManager:
        cm = ContextManager(
            SPEC,
            store=store or f"sqlite:///{tmp_path / 'ck.db'}",
            workspace=tmp_path / "ws",
            tokenizer=f"hf:{deepseek_tokenizer}",
        )
        opened.append(cm)
        return cm

    yield open_manager
    for cm in opened:
        await cm.close()
