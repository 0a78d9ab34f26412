"""Stores under network faults: a server that stops answering, a reply lost after the commit.

Each server is reached through a TCP forwarder on loopback (`support.tcp_proxy`) that can
black-hole the link (connections accepted, nothing ever answered) or drop the connection
once the server acted on a request but before its reply reaches the client. The fault is
real: the driver sees a silent socket or a closed one, exactly as over a broken network.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from contextkeep import ContextManager, ModelSpec
from contextkeep._errors import StoreError
from contextkeep._messages import Message
from contextkeep.stores import RedisStore, SQLStore, Store, open_store
from stores.store_backends import SERVERS, unreachable
from support import backends, call, result, service_unavailable
from support.tcp_proxy import Proxy

NETWORKED = backends("postgresql", "mariadb", "redis")
# What the client sends to make its write durable: the fault drops the reply to it.
COMMIT_MARKER = {"postgresql": b"COMMIT", "mariadb": b"COMMIT", "redis": b"EVALSHA"}
SHORT = {"connect_timeout": "1", "statement_timeout": "1"}
BOUND_S = 60  # a call that never returns fails the test here instead of hanging the run


def _via(name: str, port: int, prefix: str, **params: str) -> str:
    """The server's store URL through the proxy on `port`, under its own tables / keys."""
    parts = urlsplit(SERVERS[name])
    user = parts.netloc.rpartition("@")[0]
    key = "key_prefix" if name == "redis" else "table_prefix"
    query = "&".join(f"{k}={v}" for k, v in {key: prefix, **params}.items())
    return f"{parts.scheme}://{user + '@' if user else ''}127.0.0.1:{port}{parts.path}?{query}"


@pytest.fixture(params=NETWORKED)
async def server(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, Proxy, str]]:
    """(backend, a proxy in front of its server, a fresh prefix); drops the prefix's data after."""
    name = request.param
    if reason := unreachable(name):
        service_unavailable(name, reason)
    port = urlsplit(SERVERS[name]).port or {"postgresql": 5432, "mariadb": 3306, "redis": 6379}[name]
    prefix = f"flt{uuid.uuid4().hex[:8]}" + (":" if name == "redis" else "_")
    async with Proxy(port) as proxy:
        yield name, proxy, prefix
    key = "key_prefix" if name == "redis" else "table_prefix"
    direct = open_store(f"{SERVERS[name]}?{key}={prefix}")
    try:
        if isinstance(direct, SQLStore):
            await direct.drop_tables()
        elif isinstance(direct, RedisStore):
            await direct.delete_keys()
    finally:
        await direct.close()


def _pool(name: str) -> dict[str, str]:
    return {} if name == "redis" else {"pool_timeout": "1"}


async def test_a_black_holed_server_fails_each_call_with_store_error_and_the_store_recovers(server) -> None:
    name, proxy, prefix = server
    store = open_store(_via(name, proxy.port, prefix, **SHORT, **_pool(name)))
    try:
        async with asyncio.timeout(BOUND_S):
            assert await store.append("c", [Message("user", "one", id="a")], expected_length=0)
            assert await store.count_messages("c") == 1  # a pooled connection for reads too
            proxy.black_hole()
            # A pooled connection that stops answering, for a read and for a write.
            with pytest.raises(StoreError, match=r"count_messages .*timed out"):
                await store.count_messages("c")
            with pytest.raises(StoreError, match=r"append .*timed out"):
                await store.append("c", [Message("user", "two", id="b")], expected_length=1)
            # A store that has to open its first connection into the black hole (SQL: its schema check).
            fresh = open_store(_via(name, proxy.port, prefix, **SHORT, **_pool(name)))
            try:
                with pytest.raises(StoreError, match=r"timed out|timeout"):
                    await fresh.load_messages("c")
            finally:
                await fresh.close()
            proxy.heal()
            # The network is back: the same store object answers again, nothing half-written.
            assert [m.id for m in await store.load_messages("c")] == ["a"]
            assert await store.append("c", [Message("user", "two", id="b")], expected_length=1)
            assert await store.count_messages("c") == 2
    finally:
        await store.close()


async def test_a_locked_sqlite_file_fails_with_store_error_within_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = open_store(f"sqlite:///{path}?statement_timeout=0.2&pool_timeout=0.2")
    try:
        assert await store.append("c", [Message("user", "one", id="a")], expected_length=0)
        other = sqlite3.connect(path, isolation_level=None)  # another writer holding the file's lock
        try:
            other.execute("BEGIN IMMEDIATE")
            async with asyncio.timeout(BOUND_S):
                with pytest.raises(StoreError, match="append"):
                    await store.append("c", [Message("user", "two", id="b")], expected_length=1)
            other.execute("ROLLBACK")
        finally:
            other.close()
        assert await store.append("c", [Message("user", "two", id="b")], expected_length=1)
    finally:
        await store.close()


def _manager(store: Store | str, tmp_path: Path) -> ContextManager:
    return ContextManager(
        ModelSpec("test-model", 100_000), store=store, workspace=tmp_path / "ws", tokenizer="heuristic"
    )


async def test_a_reply_lost_after_the_commit_stores_the_retried_batch_once(server, tmp_path: Path) -> None:
    name, proxy, prefix = server
    cm = _manager(_via(name, proxy.port, prefix), tmp_path)
    batch: list[dict[str, Any]] = [call("k1", "ls"), result("k1", "a.txt b.txt")]
    try:
        async with asyncio.timeout(BOUND_S), cm.session("conv") as s:
            await s.add([{"role": "system", "content": "be brief"}, {"role": "user", "content": "list"}])
            proxy.cut_reply_after(COMMIT_MARKER[name])
            try:
                stored = await s.add(batch)
            except StoreError:  # the agent cannot know the batch is stored: it retries
                stored = await s.add(batch)
            assert proxy.cuts == 1  # the server acted on the request and its reply was lost
            assert [m.id for m in stored] == ["m000002", "m000003"]
    finally:
        await cm.close()
    # Read back directly from the server, by a new instance.
    key = "key_prefix" if name == "redis" else "table_prefix"
    check = _manager(f"{SERVERS[name]}?{key}={prefix}", tmp_path)
    try:
        async with check.session("conv") as s:
            transcript = list(s.transcript)
    finally:
        await check.close()
    assert [(m.role, m.id) for m in transcript] == [
        ("system", "m000000"),
        ("user", "m000001"),
        ("assistant", "m000002"),
        ("tool", "m000003"),
    ]


async def test_a_retry_never_takes_another_writers_batch_for_its_own(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        mine = [Message("user", "mine", id="m000000")]
        theirs = [Message("user", "theirs", id="m000000")]
        assert await store.append("c", theirs, expected_length=0)
        assert not await store.append("c", mine, expected_length=0)  # same id, other content
        assert not await store.append("c", [Message("user", "theirs", id="x")], expected_length=0)
        assert await store.append("c", theirs, expected_length=0)  # the very batch: acknowledged again
        assert [m.text for m in await store.load_messages("c")] == ["theirs"]
    finally:
        await store.close()
