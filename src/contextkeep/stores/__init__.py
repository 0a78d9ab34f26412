"""State stores: the transcript, versioned documents and leases, with compare-and-set writes.

:func:`open_store` builds one from a URL; :func:`default_store_url` is the
embedded SQLite default. :class:`SQLStore` and :class:`RedisStore` import their
drivers lazily, so a missing optional extra fails only when that store is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from contextkeep.stores.base import AtomicStore, Document, DocumentWrite, MigratableStore, NamedStore, Store
from contextkeep.stores.memory import MemoryStore
from contextkeep.stores.url import default_store_url, migrate, open_store

if TYPE_CHECKING:
    from contextkeep.stores.redis import RedisStore
    from contextkeep.stores.sql import SQLStore

__all__ = [
    "AtomicStore",
    "Document",
    "DocumentWrite",
    "MemoryStore",
    "MigratableStore",
    "NamedStore",
    "RedisStore",
    "SQLStore",
    "Store",
    "default_store_url",
    "migrate",
    "open_store",
]

_LAZY = {"RedisStore": "contextkeep.stores.redis", "SQLStore": "contextkeep.stores.sql"}


def __getattr__(name: str) -> Any:
    # redis is an optional extra: importing contextkeep.stores must not require it.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
