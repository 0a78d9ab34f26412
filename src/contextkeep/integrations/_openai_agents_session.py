"""`ContextKeepSession`: the Agents SDK's `Session` protocol on a contextkeep store."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import cast

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit

from contextkeep._manager import ContextManager
from contextkeep.stores.base import Document

__all__ = ["SESSION_DOCUMENT", "ContextKeepSession"]

SESSION_DOCUMENT = "openai_agents.session"
"""The store document kind a `ContextKeepSession` keeps its items under."""


class ContextKeepSession:
    """An Agents SDK session (`agents.memory.Session`) whose items live in a contextkeep store.

    The items are one versioned document (kind `SESSION_DOCUMENT`) of the conversation
    `session_id`, beside (never in) the transcript a `ContextKeepModel` keeps under that id;
    every change is compare-and-set, so instances sharing the store do not lose each
    other's items. Each change rewrites the document: meant for a conversation's items,
    not for millions of them.

    Args:
        manager: The context manager whose store keeps the items.
        session_id: The conversation's id.
        session_settings: The SDK's settings (`limit`: how many of the latest items
            `get_items` returns by default).
    """

    def __init__(
        self, manager: ContextManager, session_id: str, *, session_settings: SessionSettings | None = None
    ) -> None:
        self.session_id = session_id
        """The conversation's id in the store."""
        self.session_settings: SessionSettings | None = session_settings or SessionSettings()
        """The SDK's session settings."""
        self._store = manager.store

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items in order; the latest `limit` (or `session_settings.limit`) of them if set."""
        items = _items(await self._load())
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return [cast(TResponseInputItem, json.loads(item)) for item in items]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append `items`."""
        if items:
            added = [json.dumps(item, ensure_ascii=False) for item in items]
            await self._change(lambda stored: [*stored, *added])

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item (None when there is none)."""
        popped: list[str] = []

        def pop(stored: list[str]) -> list[str]:
            popped[:] = stored[-1:]
            return stored[:-1]

        await self._change(pop)
        return cast(TResponseInputItem, json.loads(popped[0])) if popped else None

    async def clear_session(self) -> None:
        """Remove every item."""
        await self._change(lambda _: [])

    async def _load(self) -> Document:
        return await self._store.load_document(self.session_id, SESSION_DOCUMENT)

    async def _change(self, change: Callable[[list[str]], list[str]]) -> None:
        """Apply `change` to the stored items with compare-and-set; on conflict, read and apply again."""
        while True:
            document = await self._load()
            data = {"items": change(_items(document))}
            if await self._store.save_document(
                self.session_id, SESSION_DOCUMENT, data, expected_version=document.version
            ):
                return


def _items(document: Document) -> list[str]:
    """The stored items, each as its JSON text (decoded on the way out: the caller gets its own)."""
    return list(document.data.get("items", []))
