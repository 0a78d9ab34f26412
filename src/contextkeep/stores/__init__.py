"""State stores: the transcript, versioned documents and leases, with compare-and-set writes."""

from contextkeep.stores.base import Document, Store
from contextkeep.stores.memory import MemoryStore

__all__ = ["Document", "MemoryStore", "Store"]
