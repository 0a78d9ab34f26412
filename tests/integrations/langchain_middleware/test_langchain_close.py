"""Closing `ContextKeepMiddleware` on the blocking path writes the tool-result copies its sessions owe."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path

from langchain_core.messages import (
    HumanMessage,
)

from contextkeep._capabilities import ModelSpec
from contextkeep._manager import ContextManager
from contextkeep._offload import LocalWorkspace
from contextkeep.integrations.langchain import ContextKeepMiddleware
from support.langchain_harness import MAX_TOKENS, TASK, WINDOW, ProviderModel, agent_for, config, deepseek


class HeldWorkspace(LocalWorkspace):
    """A workspace whose tool-result copies are held until someone waits for what it owes."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()

    def _replace(self, path: str, data: bytes) -> None:
        self.gate.wait()
        super()._replace(path, data)

    def _replace_many(self, files: Mapping[str, bytes]) -> None:
        self.gate.wait()
        super()._replace_many(files)

    async def flush_pending(self) -> None:
        self.gate.set()
        await super().flush_pending()


async def test_closing_the_blocking_path_writes_the_copies_its_sessions_owe(tmp_path: Path) -> None:
    """A script on `agent.invoke` may remove the workspace right after `close` (the example does)."""
    workspace = HeldWorkspace(tmp_path / "ws")
    cm = ContextManager(
        ModelSpec("deepseek-chat", context_window=WINDOW, max_output_tokens=MAX_TOKENS),
        store="memory://",
        workspace=workspace,
        tokenizer=deepseek(),
    )
    middleware = ContextKeepMiddleware(cm)
    try:
        agent = agent_for(ProviderModel(counter=cm.new_counter(), tool_calls=3), middleware)
        await asyncio.to_thread(agent.invoke, {"messages": [HumanMessage(TASK)]}, config("c"))
        await asyncio.to_thread(middleware.close)
        transcript = (await middleware.session("c")).transcript
        refs = [m.metadata["ck_ref"] for m in transcript if m.role == "tool"]
        assert len(refs) == 3 and all(Path(workspace.locate(ref)).is_file() for ref in refs)
    finally:
        workspace.gate.set()
        await cm.close()
