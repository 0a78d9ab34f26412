"""A user's own `Offloader` as a full workspace; what it lacks comes from a default workspace.

`ContextManager(workspace=my_offloader)` wraps any object with AgentScope's two methods
(sync or async) in an :class:`OffloaderWorkspace` over the default local workspace:

- a long tool result goes to `offload_tool_result(session_id, message)`, and the view
  shows the reference it returned;
- messages compaction removes go to `offload_context(session_id, msgs)`, and to the
  default workspace's `context.jsonl` too: the view names spans of that file (their
  references are part of the compaction state, decided before anything is offloaded);
- snapshots are numbered and written in the default workspace; a
  :class:`SnapshotOffloader` receives each one as well, and its reference is shown;
- data files (images) stay in the default workspace;
- reading back: a :class:`ReadableOffloader` reads its own references. Otherwise its
  tool results are also kept in the default workspace, and
  `sessions/{session}/references.jsonl` maps each reference it returned to that copy,
  so `read` and the `recall` tool find it after a restart too.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from contextkeep._errors import WorkspaceError
from contextkeep._messages import Message
from contextkeep._offload.protocols import Offloader, ReadableOffloader, SnapshotOffloader
from contextkeep._offload.workspace import Workspace, json_lines

__all__ = ["OffloaderWorkspace"]


class OffloaderWorkspace(Workspace):
    """`offloader` (AgentScope's protocol) plus `storage` for everything it does not provide."""

    def __init__(self, offloader: Offloader, storage: Workspace) -> None:
        super().__init__()
        if not isinstance(offloader, Offloader):
            raise WorkspaceError(
                f"{type(offloader).__name__} is not an Offloader: it needs offload_context(session_id, msgs) "
                "and offload_tool_result(session_id, tool_result)"
            )
        self.offloader = offloader
        """The user's offloader."""
        self.storage = storage
        """Where context copies, snapshots, data files and the reference index live."""
        self._aliases: dict[str, str] = {}
        """Reference the offloader returned → its copy in `storage` ("": the offloader has the only one)."""
        self._indexed: dict[str, set[str]] = {}
        """Per session, the offloader's references loaded from (or added to) its index."""

    # Storage: the default workspace's primitives under this layout.
    def _append(self, path: str, data: bytes) -> None:
        self.storage._append(path, data)

    def _create(self, path: str, data: bytes) -> bool:
        return self.storage._create(path, data)

    def _replace(self, path: str, data: bytes) -> None:
        self.storage._replace(path, data)

    def _replace_many(self, files: Mapping[str, bytes]) -> None:
        self.storage._replace_many(files)

    def _read(self, path: str) -> bytes | None:
        return self.storage._read(path)

    def _list(self, folder: str) -> list[str]:
        return self.storage._list(folder)

    def locate(self, reference: str) -> str:
        """Where a reference lives; an offloader's own reference is returned as it is."""
        local = self._aliases.get(reference)
        return reference if local == "" else self.storage.locate(local or reference)

    # Offloading.
    async def offload_context(self, session_id: str, messages: Sequence[Message]) -> str:
        """Append to the default `context.jsonl`, then hand the messages (each once) to the offloader."""
        await super().offload_context(session_id, messages)
        unique = list({m.id or id(m): m for m in messages}.values())  # spans of one pass may overlap
        return await _reference(self.offloader.offload_context, session_id, unique)

    async def offload_tool_result(self, session_id: str, tool_call_id: str, content: str) -> str:
        """The offloader's reference for the result (given as a `tool` message); a copy if it cannot read.

        The copy is written before the append it belongs to is won, by every instance that tries:
        its name holds a digest of the content, so a losing instance never overwrites another's.
        """
        message = Message("tool", content, tool_call_id=tool_call_id)
        reference = await _reference(self.offloader.offload_tool_result, session_id, message)
        local = ""
        if not isinstance(self.offloader, ReadableOffloader):
            digest = hashlib.sha256(content.encode()).hexdigest()[:16]
            local = await super().offload_tool_result(session_id, f"{tool_call_id}.{digest}", content)
        await self._remember(session_id, reference, local)
        return reference

    async def _write_numbered(
        self, session_id: str, action: str, payload: Mapping[str, Any]
    ) -> tuple[int, str]:
        step, local = await super()._write_numbered(session_id, action, payload)
        offloader = self.offloader
        if not isinstance(offloader, SnapshotOffloader):
            return step, local
        reference = await _reference(offloader.offload_snapshot, session_id, {"step": step, **payload})
        await self._remember(session_id, reference, local)
        return step, reference

    # Reading back.
    async def resolve(self, session_id: str, reference: str) -> str:
        """A reference the offloader returned for the session as it is, else the session's own path."""
        if reference in await self._index(session_id):
            return reference
        return await super().resolve(session_id, reference)

    async def read(self, reference: str, *, offset: int = 0, limit: int | None = None) -> str:
        """Text behind a reference, read through the offloader's alias when it made one."""
        local = self._aliases.get(reference)
        if local:
            return await super().read(local, offset=offset, limit=limit)
        offloader = self.offloader
        if not isinstance(offloader, ReadableOffloader):
            return await super().read(reference, offset=offset, limit=limit)
        if local is None:  # not known as the offloader's: the default workspace may hold it
            try:
                return await super().read(reference, offset=offset, limit=limit)
            except WorkspaceError:
                pass
        text = await _call(offloader.read, reference)
        if not isinstance(text, str):
            raise WorkspaceError(f"{_name(offloader.read)} returned {type(text).__name__}, not text")
        return text[offset : None if limit is None else offset + limit]

    # The reference index.
    def _index_path(self, session_id: str) -> str:
        return f"{self.session_dir(session_id)}/references.jsonl"

    async def _index(self, session_id: str) -> set[str]:
        if session_id not in self._indexed:
            known: set[str] = set()
            for r in json_lines(await asyncio.to_thread(self._read, self._index_path(session_id))):
                if isinstance(reference := r.get("reference"), str):
                    known.add(reference)
                    self._aliases[reference] = str(r.get("local") or "")
            self._indexed[session_id] = known
        return self._indexed[session_id]

    async def _remember(self, session_id: str, reference: str, local: str) -> None:
        known = await self._index(session_id)
        if reference in known and self._aliases.get(reference) == local:
            return
        line = json.dumps({"reference": reference, "local": local}, ensure_ascii=False) + "\n"
        async with self._lock:
            await asyncio.to_thread(self._append, self._index_path(session_id), line.encode())
        known.add(reference)
        self._aliases[reference] = local


async def _call(method: Callable[..., Any], *args: Any) -> Any:
    """Call a user's method, async or sync (in a worker thread: it may block on I/O)."""
    if inspect.iscoroutinefunction(method):
        return await method(*args)
    result = await asyncio.to_thread(method, *args)
    return await result if inspect.isawaitable(result) else result


async def _reference(method: Callable[..., Any], *args: Any) -> str:
    reference = await _call(method, *args)
    if not isinstance(reference, str) or not reference:
        raise WorkspaceError(f"{_name(method)} returned {reference!r}, not a reference string")
    return reference


def _name(method: Callable[..., Any]) -> str:
    return str(getattr(method, "__qualname__", method))
