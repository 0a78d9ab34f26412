"""Where removed content goes, so the agent can read it back.

Layout under the workspace root (references are paths relative to it):

```
sessions/{session}/context.jsonl              dropped or summarised messages, appended
sessions/{session}/tool_result-{call}.txt     a tool result's full text
sessions/{session}/op_snapshots/step_003_sql_query.json
data/{sha256}.{ext}                           images and files, deduplicated by content
```

A reference into `context.jsonl` names the message ids it covers
(`sessions/s/context.jsonl#m000004..m000019`). Writes are append-only or
create-new; a message already in `context.jsonl` is never appended twice, so a
compaction retried after a crash duplicates nothing.

An append is whole or fails with `WorkspaceError`: a short write is continued, and a
line torn by a crash or a full disk is fenced off by the next append, so readers skip
exactly that line (with a warning) and the messages it held are written again.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from contextkeep._errors import WorkspaceError
from contextkeep._messages import Message, message_json
from contextkeep._offload._durable import syncfs, write_all, write_closed
from contextkeep._offload._paths import DATA_DIR, confine, safe_segment, split_reference
from contextkeep._offload.snapshot import ActionSnapshot

__all__ = ["LocalWorkspace", "Workspace"]

logger = logging.getLogger("contextkeep.workspace")
_STEP = re.compile(r"^step_(\d+)_")


class PendingWrites(Protocol):
    """Copies queued for files of this workspace and not written yet (see `_offload/_background`)."""

    async def flush(self) -> None:
        """Wait until they are written."""


class Workspace(ABC):
    """The layout over some storage; subclasses supply six primitive operations.

    It is contextkeep's full offloader: AgentScope's two methods (its `offload_tool_result`
    takes the call id and the text), reading back, snapshots and data files.
    """

    def __init__(self) -> None:
        self._known_ids: dict[str, set[str]] = {}
        self._next_step: dict[str, int] = {}
        self._lock = asyncio.Lock()
        self._pending: dict[str, PendingWrites] = {}
        """Files a background writer still owes, by path: a read of one waits for it."""

    # Primitives (blocking; run in a worker thread).
    @abstractmethod
    def _append(self, path: str, data: bytes) -> None:
        """Append whole lines: from a fresh line (a torn tail is fenced off), all of them, durably.

        Anything less raises `WorkspaceError`; bytes written before the failure may stay.
        """

    @abstractmethod
    def _create(self, path: str, data: bytes) -> bool:
        """Write a new file; False if it exists already."""

    @abstractmethod
    def _replace(self, path: str, data: bytes) -> None: ...
    @abstractmethod
    def _read(self, path: str) -> bytes | None:
        """Contents, or None if missing."""

    @abstractmethod
    def _list(self, folder: str) -> list[str]: ...
    @abstractmethod
    def locate(self, reference: str) -> str:
        """Where a reference lives (absolute path or URL), for tools outside contextkeep."""

    def _replace_many(self, files: Mapping[str, bytes]) -> None:
        """Write several files as `_replace` does: a background writer's batch.

        A storage that can make many files durable at once overrides it.
        """
        for path, data in files.items():
            self._replace(path, data)

    # Paths.
    def session_dir(self, session_id: str) -> str:
        """The session's folder, relative to the root."""
        return f"sessions/{safe_segment(session_id, 'session id')}"

    def tool_result_ref(self, session_id: str, tool_call_id: str) -> str:
        """Reference of a tool result's full text (a pure function of the ids)."""
        return f"{self.session_dir(session_id)}/tool_result-{safe_segment(tool_call_id, 'tool call id')}.txt"

    def context_ref(self, session_id: str, messages: Sequence[Message]) -> str:
        """Reference of a span of messages in `context.jsonl`."""
        first = next((m.id for m in messages if m.id), None)
        last = next((m.id for m in reversed(messages) if m.id), None)
        span = f"#{first}..{last}" if first else ""
        return f"{self.session_dir(session_id)}/context.jsonl{span}"

    # Offloader.
    async def offload_context(self, session_id: str, messages: Sequence[Message]) -> str:
        """Append removed messages to `context.jsonl` (each once); return the span's reference."""
        path = f"{self.session_dir(session_id)}/context.jsonl"
        async with self._lock:
            known = await self._ids_in(session_id, path)
            fresh: list[Message] = []
            for m in messages:  # spans of one pass may overlap: each message once
                if m.id and m.id in known:
                    continue
                fresh.append(m)
                if m.id:
                    known.add(m.id)
            if fresh:
                lines = "".join(message_json(m) + "\n" for m in fresh)
                try:
                    await asyncio.to_thread(self._append, path, lines.encode())
                except BaseException:
                    # Some lines may have landed whole, one torn: the file says which, next time.
                    del self._known_ids[session_id]
                    raise
        return self.context_ref(session_id, messages)

    async def offload_tool_result(self, session_id: str, tool_call_id: str, content: str) -> str:
        """Persist a tool result's full text; return its reference."""
        ref = self.tool_result_ref(session_id, tool_call_id)
        await asyncio.to_thread(self._replace, ref, content.encode())
        return ref

    async def offload_data(self, data: bytes, ext: str) -> str:
        """Store bytes under their SHA-256 (stored once however often offloaded); return the reference."""
        suffix = safe_segment(ext.lstrip(".") or "bin", "extension")
        ref = f"{DATA_DIR}/{hashlib.sha256(data).hexdigest()}.{suffix}"
        await asyncio.to_thread(self._create, ref, data)
        return ref

    async def snapshot(self, session_id: str, snapshot: ActionSnapshot) -> tuple[int, str]:
        """Write an action snapshot with every DB-GPT field; its step number and reference."""
        return await self._write_numbered(session_id, snapshot.action, snapshot.document(session_id))

    async def write_snapshot(self, session_id: str, action: str, payload: Mapping[str, Any]) -> str:
        """Write `op_snapshots/step_NNN_{action}.json`; numbering survives restarts; never overwrites."""
        return (await self._write_numbered(session_id, action, payload))[1]

    async def _write_numbered(
        self, session_id: str, action: str, payload: Mapping[str, Any]
    ) -> tuple[int, str]:
        folder = f"{self.session_dir(session_id)}/op_snapshots"
        name = safe_segment(action or "action", "action")
        async with self._lock:
            if session_id not in self._next_step:
                existing = await asyncio.to_thread(self._list, folder)
                steps = [int(m.group(1)) for f in existing if (m := _STEP.match(f))]
                self._next_step[session_id] = max(steps, default=0) + 1
            while True:
                step = self._next_step[session_id]
                self._next_step[session_id] = step + 1
                ref = f"{folder}/step_{step:03d}_{name}.json"
                body = json.dumps({"step": step, **payload}, ensure_ascii=False, indent=2, default=str)
                if await asyncio.to_thread(self._create, ref, body.encode()):
                    return step, ref

    async def resolve(self, session_id: str, reference: str) -> str:
        """`reference` normalised, if it is the session's (or a shared data file); else `UnsafePathError`."""
        return confine(reference, self.session_dir(session_id))

    async def flush_pending(self) -> None:
        """Wait for every copy a background writer still owes this workspace (`ContextManager.close`)."""
        for pending in list(dict.fromkeys(self._pending.values())):
            await pending.flush()

    async def read(self, reference: str, *, offset: int = 0, limit: int | None = None) -> str:
        """Text behind a reference, from character `offset`, at most `limit` characters.

        A JSON-lines file reads as its valid lines (a torn one is skipped with a warning),
        only those of the reference's `#first..last` span when it names one.
        """
        path, span = split_reference(confine(reference))
        pending = self._pending.get(path)
        if pending is not None:  # a view may name a copy before it is written: the read waits for it
            await pending.flush()
        raw = await asyncio.to_thread(self._read, path)
        if raw is None:
            raise WorkspaceError(f"nothing stored at {reference!r}")
        text = raw.decode("utf-8", errors="replace")
        if path.endswith(".jsonl"):
            text = "".join(f"{line}\n" for line, _ in _records(text, reference, span))
        return text[offset : None if limit is None else offset + limit]

    async def _ids_in(self, session_id: str, path: str) -> set[str]:
        if session_id not in self._known_ids:
            # A torn line is skipped: its messages count as not written, and are written again.
            records = json_lines(await asyncio.to_thread(self._read, path), path)
            self._known_ids[session_id] = {i for r in records if (i := r.get("id"))}
        return self._known_ids[session_id]


Record = tuple[str, dict[str, Any]]
"""A valid line of a JSON-lines file and its object."""


def json_lines(raw: bytes | None, where: str = "a JSON-lines file") -> list[dict[str, Any]]:
    """The records of a JSON-lines file (None: missing); a torn line is skipped with a warning."""
    return [record for _, record in _records((raw or b"").decode(errors="replace"), where)]


def _records(text: str, where: str, span: str | None = None) -> list[Record]:
    """The valid lines of JSON-lines `text` and their objects, one warning naming those skipped.

    With `span` (`first..last`), only the records from id `first` to id `last`, in file order.
    """
    first, _, last = (span or "").partition("..")
    inside = span is None
    records: list[Record] = []
    torn: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue  # holds nothing, so nothing was lost
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            torn.append(number)
            continue
        mid = record.get("id")
        inside = inside or mid == first
        if inside:
            records.append((line, record))
            if span is not None and mid == (last or first):
                break
    if torn:
        logger.warning(
            "%s: skipped %d unreadable line(s) (torn by a crash or a full disk?), line %s",
            where,
            len(torn),
            ", ".join(map(str, torn[:5])),
        )
    return records


@contextmanager
def storage_errors(action: str, path: str) -> Iterator[None]:
    """Any `OSError` inside becomes a `WorkspaceError` naming `path` and the errno (ENOSPC, EROFS, ...)."""
    try:
        yield
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        raise WorkspaceError(f"could not {action} {path!r}: {code} ({exc.strerror or exc})") from exc


class LocalWorkspace(Workspace):
    """A workspace on the local filesystem; files private to the owner (0600, folders 0700)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = Path(root).resolve()
        self._resolved: dict[str, Path] = {}
        """Folders the background writer writes to, resolved once (a resolve is a syscall per
        path component, each a GIL hand-off with the caller's thread)."""

    def locate(self, reference: str) -> str:
        """The reference's absolute path under the workspace root."""
        return str(self._path(split_reference(confine(reference))[0]))

    def _path(self, relative: str) -> Path:
        path = (self.root / relative).resolve()
        if not path.is_relative_to(self.root):
            raise WorkspaceError(f"{relative!r} resolves outside the workspace")
        return path

    def _prepare(self, relative: str) -> Path:
        path = self._path(relative)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path

    def _append(self, path: str, data: bytes) -> None:
        with storage_errors("append to", path):
            fd = os.open(self._prepare(path), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                # Appenders of every process take turns, so the tail checked is the one written after
                # (closing the descriptor releases the lock, also when a holder is killed).
                fcntl.flock(fd, fcntl.LOCK_EX)
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    # A crash or a full disk tore the last line. A newline, in the same write as
                    # the batch, fences it off as one line readers skip: nothing is truncated, so
                    # no fence can destroy bytes (another writer's, or its own if it dies), and a
                    # torn fence is fenced again by the next append.
                    data = b"\n" + data
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

    def _create(self, path: str, data: bytes) -> bool:
        with storage_errors("create", path):
            target = self._prepare(path)
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return False
            try:
                write_closed(fd, data, durably=True)
            except OSError:
                target.unlink(missing_ok=True)  # ours and incomplete: a retry creates it whole
                raise
            return True

    def _replace(self, path: str, data: bytes) -> None:
        self._replace_many({path: data})

    def _replace_many(self, files: Mapping[str, bytes]) -> None:
        """Each file whole or not at all (written aside, then renamed over), all durable on return.

        Where the OS has `syncfs`, one call makes the whole batch durable (an fsync per file
        costs a journal commit each, ~4 ms on ext4, and most of the writer's CPU); else each
        file is fsynced. A rename lost in a crash leaves the old file or none, which the
        transcript's copy rewrites (`_offload._background`).
        """
        folders: dict[str, Path] = {}
        staged: list[tuple[Path, Path, str]] = []
        try:
            for path, data in files.items():
                with storage_errors("write", path):
                    folder, name = self._folder(path, folders)
                    tmp = folder / f".{name}.{uuid.uuid4().hex[:12]}.tmp"
                    staged.append((tmp, folder / name, path))
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    write_closed(fd, data, durably=syncfs is None)
            if syncfs is not None and staged:
                with storage_errors("write", staged[0][2]):
                    syncfs(staged[0][0].parent)
            while staged:
                tmp, target, path = staged[-1]
                with storage_errors("write", path):
                    os.replace(tmp, target)
                staged.pop()
        finally:
            for tmp, _, _ in staged:  # the ones not renamed: the batch failed
                tmp.unlink(missing_ok=True)

    def _folder(self, path: str, folders: dict[str, Path]) -> tuple[Path, str]:
        """The folder of the file `path` (inside the root, created once per batch), and its name."""
        parent, _, name = path.rpartition("/")
        if name in ("", ".", ".."):
            raise WorkspaceError(f"{path!r} names no file")
        if parent not in folders:
            folder = self._resolved.get(parent)
            if folder is None:
                folder = self._resolved[parent] = self._path(parent) if parent else self.root
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            folders[parent] = folder
        return folders[parent], name

    def _read(self, path: str) -> bytes | None:
        with storage_errors("read", path):
            try:
                return self._path(path).read_bytes()
            except FileNotFoundError:
                return None

    def _list(self, folder: str) -> list[str]:
        with storage_errors("list", folder):
            try:
                return sorted(os.listdir(self._path(folder)))
            except FileNotFoundError:
                return []
