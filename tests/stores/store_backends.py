"""The backends the store tests run against, and how each test opens and removes its stores."""

from __future__ import annotations

import functools
import os
import socket
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from contextkeep._messages import Message
from contextkeep.stores import RedisStore, SQLStore, Store, open_store
from support import backends

SERVERS = {
    "postgresql": os.environ.get(
        "CONTEXTKEEP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    ),
    "mariadb": os.environ.get("CONTEXTKEEP_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
    "redis": os.environ.get("CONTEXTKEEP_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
}
DEFAULT_PORTS = {"postgresql": 5432, "mariadb": 3306, "redis": 6379}
ALL = backends("memory", "sqlite", "postgresql", "mariadb", "redis")
SQL = backends("sqlite", "postgresql", "mariadb")
PERSISTENT = backends("sqlite", "postgresql", "mariadb", "redis")


@functools.cache
def unreachable(name: str) -> str | None:
    """Why the server cannot be reached, or None (probed once per run)."""
    parts = urlsplit(SERVERS[name])
    try:
        socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORTS[name]), 1
        ).close()
    except OSError as exc:
        return str(exc)
    return None


def unique(stem: str) -> str:
    return f"{stem}{uuid.uuid4().hex[:10]}"


class Backend:
    """Opens stores of one backend under fresh prefixes and removes them afterwards."""

    def __init__(self, name: str, tmp_path: Path) -> None:
        self.name = name
        self.tmp_path = tmp_path
        self.opened: list[tuple[str, Store]] = []

    def url(self, prefix: str | None = None, **params: str) -> str:
        """A store URL under `prefix` (a new one if omitted)."""
        if self.name == "memory":
            return "memory://"
        prefix = prefix or unique("t")
        if self.name == "redis":
            base, key = SERVERS["redis"], "key_prefix"
            prefix += ":"
        else:
            base = f"sqlite:///{self.tmp_path / 'store.db'}" if self.name == "sqlite" else SERVERS[self.name]
            key = "table_prefix"
            prefix += "_"
        query = "&".join(f"{k}={v}" for k, v in {key: prefix, **params}.items())
        return f"{base}{'&' if '?' in base else '?'}{query}"

    def open(self, url: str | None = None) -> Store:
        url = url or self.url()
        store = open_store(url)
        self.opened.append((url, store))
        return store

    def reopen(self, store: Store) -> Store:
        """Another instance on the same data (the same object for memory: it has no other)."""
        if self.name == "memory":
            return store
        return self.open(next(url for url, s in self.opened if s is store))

    async def cleanup(self) -> None:
        done: set[str] = set()
        for url, store in self.opened:
            key = url.split("?")[-1]
            if key not in done:
                done.add(key)
                fresh = open_store(url)  # not the tested instance: it may hold a broken schema
                if isinstance(fresh, SQLStore):
                    await fresh.drop_tables()
                elif isinstance(fresh, RedisStore):
                    await fresh.delete_keys()
                await fresh.close()
            await store.close()


def conv() -> str:
    return unique("conv-")


def msgs(*texts: str) -> list[Message]:
    return [Message("user", t) for t in texts]
