"""Tool-result copies written after their messages are stored, off the caller's path.

A long tool result's reference is a pure function of what the store assigned (its call id,
or the call id and message id when the call id recurs), so `add` decides it inside its
compare-and-set attempt and writes nothing; only once the append has won is the copy queued,
and one writer thread per process writes the queued copies in batches, each made durable at
once (`Workspace._replace_many`: one `syncfs` on Linux, not an fsync per file, so the writer
costs the caller's thread little CPU and GIL time). A losing instance therefore never touches a
file the winner's message names.

The transcript holds each result's full text, so the copy is never the only one: a crash
before the write loses nothing. An instance that loads messages from the store (another
instance's, or its own from before a restart) queues them as checked copies, written only when
missing or different. Whatever is about to show or save a reference waits for the pending
batch first (`flush`): before a state is saved, before a workspace read of a file still
owed, and at close. A view may name a copy not yet written: the model answers long after the
write lands, and a read of it waits for the write.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from contextkeep._errors import WorkspaceError
from contextkeep._offload.workspace import Workspace

__all__ = ["Copy", "PendingCopies", "deferrable"]

_log = logging.getLogger("contextkeep.offload")

_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="contextkeep-offload")
"""One writer per process: batches land in order and two sessions never write one file at once.

Its thread is joined at interpreter exit, so what was queued is written on a normal exit too."""


@dataclass(frozen=True, slots=True)
class Copy:
    """One tool result's text for the file its reference names."""

    reference: str
    text: str
    check: bool = False
    """Loaded from the store: written only if the file is missing or holds something else."""


def deferrable(workspace: Workspace) -> bool:
    """Whether a tool result's reference is the workspace's own pure name (so it can be written later).

    A workspace that overrides `offload_tool_result` (a user's offloader) returns references
    only it knows; those are still offloaded before the append.
    """
    return type(workspace).offload_tool_result is Workspace.offload_tool_result


class PendingCopies:
    """The copies of one session not yet written; `flush` waits until they are."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        """Where the copies go."""
        self._lock = threading.Lock()  # the writer thread and the event loop share the queue
        self._queued: list[Copy] = []
        self._running: Future[None] | None = None
        self._error: Exception | None = None

    def add(self, copies: Iterable[Copy]) -> None:
        """Queue copies; the writer picks them up in the next batch (no waiting here)."""
        with self._lock:
            before = len(self._queued)
            self._queued.extend(copies)
            for copy in self._queued[before:]:
                self.workspace._pending[copy.reference] = self
            if len(self._queued) > before and self._running is None:
                self._running = _WRITER.submit(self._drain)

    async def flush(self) -> None:
        """Wait until every queued copy is written; a failed batch is tried again here.

        Raises `WorkspaceError` if the batch still cannot be written (the copies stay queued).
        """
        while True:
            with self._lock:
                if self._running is None:
                    if self._error is not None:
                        error, self._error = self._error, None
                        raise (
                            error
                            if isinstance(error, WorkspaceError)
                            else WorkspaceError(f"could not write offloaded tool results: {error}")
                        ) from error
                    if not self._queued:
                        return
                    self._running = _WRITER.submit(self._drain)
                running = self._running
            await asyncio.wrap_future(running)

    def _drain(self) -> None:
        """Write batches until the queue is empty (in the writer thread)."""
        while True:
            with self._lock:
                batch, self._queued = self._queued, []
                if not batch:
                    self._running = None
                    return
            try:
                self._write(batch)
                with self._lock:
                    owed = {c.reference for c in self._queued}
                    for reference in {c.reference for c in batch} - owed:
                        if self.workspace._pending.get(reference) is self:
                            del self.workspace._pending[reference]
            except Exception as exc:  # kept for `flush` to report; the copies stay queued
                _log.warning("offloaded tool results not written yet (%d queued): %s", len(batch), exc)
                with self._lock:
                    self._queued[:0] = batch
                    self._error = exc
                    self._running = None
                return
            with self._lock:
                self._error = None

    def _write(self, batch: list[Copy]) -> None:
        # Each reference names one message's text, so a later copy of a reference repeats it.
        files: dict[str, bytes] = {}
        for copy in {c.reference: c for c in batch}.values():
            data = copy.text.encode()
            if not (copy.check and self.workspace._read(copy.reference) == data):
                files[copy.reference] = data
        if files:
            self.workspace._replace_many(files)  # one durability barrier for the batch
