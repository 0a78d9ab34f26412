"""A workspace on any fsspec filesystem (S3, GCS, Azure, memory, ...).

Object stores cannot append: `context.jsonl` is rewritten whole on each offload
there (one writer per session at a time is assumed, as the compaction lease
guarantees). A torn last line (a write that failed midway on a filesystem that
can append) is fenced off with a newline, as `LocalWorkspace` does.
"""

from __future__ import annotations

from typing import Any

from contextkeep._errors import WorkspaceError
from contextkeep._offload._paths import confine, split_reference
from contextkeep._offload.workspace import Workspace, storage_errors

__all__ = ["FsspecWorkspace"]


class FsspecWorkspace(Workspace):
    """The workspace layout under `url` (e.g. `s3://bucket/prefix`, `memory://ws`)."""

    def __init__(self, url: str, **storage_options: Any) -> None:
        super().__init__()
        try:
            import fsspec
        except ImportError as exc:
            raise WorkspaceError(
                "FsspecWorkspace needs the 'fsspec' extra: pip install contextkeep[fsspec]"
            ) from exc
        self.fs, root = fsspec.core.url_to_fs(url, **storage_options)
        self.root = root.rstrip("/")
        self.url = url.rstrip("/")

    def locate(self, reference: str) -> str:
        """The reference's URL under the workspace's root URL."""
        return f"{self.url}/{split_reference(confine(reference))[0]}"

    def _full(self, path: str) -> str:
        return f"{self.root}/{path}"

    def _append(self, path: str, data: bytes) -> None:
        old = self._read(path) or b""
        fence = b"\n" if old and not old.endswith(b"\n") else b""
        self._replace(path, old + fence + data)

    def _create(self, path: str, data: bytes) -> bool:
        with storage_errors("create", path):
            if self.fs.exists(self._full(path)):
                return False
        self._replace(path, data)
        return True

    def _replace(self, path: str, data: bytes) -> None:
        full = self._full(path)
        with storage_errors("write", path):
            self.fs.makedirs(full.rsplit("/", 1)[0], exist_ok=True)
            self.fs.pipe_file(full, data)

    def _read(self, path: str) -> bytes | None:
        with storage_errors("read", path):
            try:
                data: bytes = self.fs.cat_file(self._full(path))
            except FileNotFoundError:
                return None
        return data

    def _list(self, folder: str) -> list[str]:
        with storage_errors("list", folder):
            try:
                return sorted(p.rsplit("/", 1)[-1] for p in self.fs.ls(self._full(folder), detail=False))
            except FileNotFoundError:
                return []
