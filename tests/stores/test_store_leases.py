"""The store contract for leases, on every backend: one owner at a time, renewal, expiry."""

from __future__ import annotations

import time

from contextkeep.stores import (
    Store,
)
from stores.store_backends import Backend, conv
from support import wait_until


async def test_leases(backend: Backend, store: Store):
    c = conv()
    other = backend.reopen(store)
    assert await store.acquire_lease(c, "summary", "alice", 10_000)
    assert not await other.acquire_lease(c, "summary", "bob", 10_000)
    assert await store.acquire_lease(c, "summary", "alice", 10_000)  # renew
    assert await other.acquire_lease(c, "other-lease", "bob", 10_000)  # names are separate
    assert await other.acquire_lease(conv(), "summary", "bob", 10_000)  # conversations too
    await other.release_lease(c, "summary", "bob")  # not the owner: no effect
    assert not await other.acquire_lease(c, "summary", "bob", 10_000)
    await store.release_lease(c, "summary", "alice")
    assert await other.acquire_lease(c, "summary", "bob", 10_000)
    assert not await store.acquire_lease(c, "summary", "alice", 10_000)


async def test_lease_expiry_takeover_and_renewal(backend: Backend, store: Store):
    c = conv()
    other = backend.reopen(store)
    assert await store.acquire_lease(c, "summary", "alice", 100)
    first_expired = time.monotonic() + 0.1 + 0.05  # the store's own clock may lag a little
    assert await store.acquire_lease(c, "summary", "alice", 60_000)  # renewal extends the expiry
    await wait_until(lambda: time.monotonic() > first_expired)
    assert not await other.acquire_lease(c, "summary", "bob", 10_000)  # past the first ttl, still held
    assert await store.acquire_lease(c, "summary", "alice", 100)  # renewed again, now short
    # Expired: taken over (each refused attempt leaves the lease as it was).
    await wait_until(lambda: other.acquire_lease(c, "summary", "bob", 10_000))
    assert not await store.acquire_lease(c, "summary", "alice", 10_000)
