"""Fixtures for the Google ADK tests (`support.adk_harness`): offline, DeepSeek's tokenizer and billing, managers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contextkeep import ContextConfig, ContextManager, ModelSpec
from contextkeep._tokens import HFEncoder, PromptCounter, counter_for_model
from support import DEEPSEEK_TOKENIZER, require_shared
from support.adk_harness import MAX_OUTPUT, WINDOW, Managers


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Google credentials, no `.env` loading: nothing could reach Google even by mistake."""
    monkeypatch.setenv("ADK_DISABLE_LOAD_DOTENV", "1")
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def deepseek() -> HFEncoder:
    """DeepSeek's real tokenizer (loaded once: the managers and the provider share it)."""
    require_shared("tokenizers", "deepseek_tokenizer.json")
    return HFEncoder(DEEPSEEK_TOKENIZER)


@pytest.fixture(scope="module")
def billing(deepseek: HFEncoder) -> PromptCounter:
    """DeepSeek's count of a prompt (its tokenizer and chat template)."""
    return counter_for_model("deepseek-chat", deepseek)


@pytest.fixture
async def managers(tmp_path: Path, deepseek: HFEncoder) -> AsyncIterator[Managers]:
    """Makes context managers on DeepSeek's tokenizer (`store` in `folder`); closes them all after."""
    made: list[ContextManager] = []

    def make(
        folder: str = "ck", store: str | None = None, config: ContextConfig | None = None
    ) -> ContextManager:
        cm = ContextManager(
            ModelSpec("deepseek-chat", WINDOW, MAX_OUTPUT),
            config=config,
            store=store or "memory://",
            workspace=tmp_path / folder / "ws",
            tokenizer=deepseek,
        )
        made.append(cm)
        return cm

    yield make
    for cm in made:
        await cm.close()
