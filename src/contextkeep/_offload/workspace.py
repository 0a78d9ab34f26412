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
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contextkeep._errors import WorkspaceError
from contextkeep._messages import Message, message_json
from contextkeep._offload._paths import safe_relative, safe_segment
from contextkeep._offload.snapshot import ActionSnapshot

__all__ = ["LocalWorkspace", "Workspace"]

_STEP = re.compile(r"^step_(\d+)_")


class Workspace(ABC):
    """The layout over some storage; subclasses supply six primitive operations.

    It is contextkeep's full offloader: AgentScope's two methods (its `offload_tool_result`
    takes the call id and the text), reading back, snapshots and data files.
    """

    def __init__(self) -> None:
        self._known_ids: dict[str, set[str]] = {}
        self._next_step: dict[str, int] = {}
        self._lock = asyncio.Lock()

    # Primitives (blocking; run in a worker thread).
    @abstractmethod
    def _append(self, path: str, data: bytes) -> None: ...
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
                    known.difference_update(m.id for m in fresh if m.id)  # not written: offer them again
                    raise
        return self.context_ref(session_id, messages)

    async def offload_tool_result(self, session_id: str, tool_call_id: str, content: str) -> str:
        """Persist a tool result's full text; return its reference."""
        ref = self.tool_result_ref(session_id, tool_call_id)
        await asyncio.to_thread(self._replace, ref, content.encode())
        return ref

    async def offload_data(self, data: bytes, ext: str) -> str:
        """Store bytes under their SHA-256 (stored once however often offloaded); return the reference."""
        ref = f"data/{hashlib.sha256(data).hexdigest()}.{safe_segment(ext.lstrip('.') or 'bin', 'extension')}"
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

    async def resolve(self, session_id: str, reference: str) -> str | None:
        """`reference` if it belongs to the session (or to the shared data files), else None."""
        return reference if reference.startswith((self.session_dir(session_id) + "/", "data/")) else None

    async def read(self, reference: str, *, offset: int = 0, limit: int | None = None) -> str:
        """Text behind a reference, from character `offset`, at most `limit` characters."""
        path = safe_relative(reference)
        raw = await asyncio.to_thread(self._read, path)
        if raw is None:
            raise WorkspaceError(f"nothing stored at {reference!r}")
        text = raw.decode("utf-8", errors="replace")
        if "#" in reference and path.endswith(".jsonl"):
            text = _select_span(text, reference.split("#", 1)[1])
        return text[offset : None if limit is None else offset + limit]

    async def _ids_in(self, session_id: str, path: str) -> set[str]:
        if session_id not in self._known_ids:
            # A torn last line from a crash is skipped: its messages are written again.
            records = json_lines(await asyncio.to_thread(self._read, path))
            self._known_ids[session_id] = {i for r in records if (i := r.get("id"))}
        return self._known_ids[session_id]


def json_lines(raw: bytes | None) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (None: missing); a torn line from a crash is skipped."""
    records = []
    for line in (raw or b"").decode(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _select_span(text: str, span: str) -> str:
    first, _, last = span.partition("..")
    out, inside = [], False
    for line in text.splitlines():
        try:
            mid = json.loads(line).get("id")
        except json.JSONDecodeError:
            continue
        inside = inside or mid == first
        if inside:
            out.append(line)
        if mid == (last or first):
            break
    return "\n".join(out) + ("\n" if out else "")


class LocalWorkspace(Workspace):
    """A workspace on the local filesystem; files private to the owner (0600, folders 0700)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = Path(root).resolve()

    def locate(self, reference: str) -> str:
        """The reference's absolute path under the workspace root."""
        return str(self._path(safe_relative(reference)))

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
        # One write() on an O_APPEND descriptor: concurrent appenders never interleave a batch.
        fd = os.open(self._prepare(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _create(self, path: str, data: bytes) -> bool:
        try:
            fd = os.open(self._prepare(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True

    def _replace(self, path: str, data: bytes) -> None:
        target = self._prepare(path)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)

    def _read(self, path: str) -> bytes | None:
        try:
            return self._path(path).read_bytes()
        except FileNotFoundError:
            return None

    def _list(self, folder: str) -> list[str]:
        try:
            return sorted(os.listdir(self._path(folder)))
        except FileNotFoundError:
            return []
