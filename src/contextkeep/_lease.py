"""The compaction lease of one conversation: who runs a pass, and how a dead holder is known.

A lease keeps two instances from compacting (and paying for a summary) at once. It names its
owner, and a holder that dies (SIGKILL, OOM, a crash) cannot give it back: whoever comes next
would wait out the whole TTL. Two things shorten that wait.

**An owner identity that outlives the process, per host.** For each (store, conversation) an
owner id is kept in numbered *slot* files under a per-user directory of the system temp
directory. A process takes a slot by holding an exclusive `flock` on its file while it holds
the lease; the kernel drops that lock the moment the process dies. The next process on this
host (the restarted agent, or any other) then gets the same slot, reads the same owner id,
and renews the dead holder's lease at once: the store lets an owner renew its own lease. Two
live processes never share an id: the second finds slot 0 locked and takes slot 1. (The
alternative, host + pid start time, needs the store to say who holds a lease, which the
`Store` protocol cannot, and the pid of a restarted process is a new one anyway; the lock
proves the holder's death directly.) A store is told apart by its `repr`, which names its
database for the built-in stores.

**A heartbeat.** While a pass runs, its holder renews the lease every `lease_heartbeat_ms`,
so `lease_ttl_ms` needs to cover only a few missed beats, not the longest pass. A holder on
another host (or without `flock`) is recognised as dead only when its TTL runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from contextkeep._errors import StoreError
from contextkeep.stores.base import Store

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: owners are per process, the TTL decides
    fcntl = None  # type: ignore[assignment]

__all__ = ["Lease", "OwnerSlot"]

_log = logging.getLogger("contextkeep.lease")
_SLOTS = 64
"""Live processes of one host that can hold distinct ids for one conversation (more: a random id)."""
_POLL_S = 0.02


class OwnerSlot:
    """A persisted owner id, held (under an exclusive `flock`) by this process until released."""

    def __init__(self, fd: int, owner: str) -> None:
        self._fd = fd
        self.owner = owner
        """The lease owner id of this slot."""

    @classmethod
    def take(cls, key: str) -> OwnerSlot | None:
        """The first free slot of `key`, or None when there is none (or no `flock` here)."""
        if fcntl is None:
            return None
        folder = Path(tempfile.gettempdir()) / f"contextkeep-{os.getuid()}" / "leases"
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            for n in range(_SLOTS):
                fd = os.open(folder / f"{key}.{n}", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)  # a live process holds this one
                    continue
                return cls(fd, _owner_id(fd))
        except OSError as exc:
            _log.warning(
                "no persisted lease owner under %s (%s): a dead holder waits out its TTL", folder, exc
            )
        return None

    def release(self) -> None:
        """Give the slot back (closing the file drops the lock)."""
        os.close(self._fd)


def _owner_id(fd: int) -> str:
    """The id stored in a slot file (written on first use; the lock is held, so no one races)."""
    stored = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    if not stored:
        stored = uuid.uuid4().hex
        os.pwrite(fd, stored.encode(), 0)
    return f"{socket.gethostname()[:64]}:{stored}"


class Lease:
    """One named lease of one conversation in `store`."""

    def __init__(self, store: Store, conversation_id: str, name: str) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.name = name
        digest = hashlib.sha256(f"{store!r}\0{conversation_id}\0{name}".encode()).hexdigest()
        self._key = digest[:32]

    @contextlib.asynccontextmanager
    async def held(self, ttl_ms: int, heartbeat_ms: int) -> AsyncIterator[bool]:
        """Wait for the lease (at most its TTL), renew it every `heartbeat_ms`; whether it was won.

        A silent holder's lease is taken over once its TTL has run out; one held under this
        host's persisted owner id (a dead process's) is taken over at once.
        """
        slot = OwnerSlot.take(self._key)
        owner = slot.owner if slot is not None else f"{socket.gethostname()[:64]}:{uuid.uuid4().hex}"
        try:
            held = await self._acquire(owner, ttl_ms)
            beat = asyncio.create_task(self._beat(owner, ttl_ms, heartbeat_ms)) if held else None
            try:
                yield held
            finally:
                if beat is not None:
                    beat.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await beat
                if held:
                    await self.store.release_lease(self.conversation_id, self.name, owner)
        finally:
            if slot is not None:
                slot.release()

    async def _acquire(self, owner: str, ttl_ms: int) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ttl_ms / 1000
        while loop.time() <= deadline:
            if await self.store.acquire_lease(self.conversation_id, self.name, owner, ttl_ms):
                return True
            await asyncio.sleep(_POLL_S)
        return await self.store.acquire_lease(self.conversation_id, self.name, owner, ttl_ms)

    async def _beat(self, owner: str, ttl_ms: int, heartbeat_ms: int) -> None:
        """Renew until cancelled; a failed renewal is retried at the next beat, a lost lease ends it."""
        while True:
            await asyncio.sleep(heartbeat_ms / 1000)
            try:
                if not await self.store.acquire_lease(self.conversation_id, self.name, owner, ttl_ms):
                    _log.warning("lease %s of %r was taken over while held", self.name, self.conversation_id)
                    return
            except StoreError as exc:
                _log.warning("lease %s of %r not renewed: %s", self.name, self.conversation_id, exc)
