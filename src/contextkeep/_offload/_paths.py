"""Turning ids into safe path segments, and references into paths confined to where they belong."""

from __future__ import annotations

import hashlib
import posixpath
import re

from contextkeep._errors import UnsafePathError

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")
MAX_REFERENCE = 4096
"""Longest reference accepted (characters, `#span` included): PATH_MAX on Linux."""
_MAX_NAME = 255
"""Longest path segment in bytes (NAME_MAX): a longer one could never be a file."""
_MAX_ID = 120
"""Longest id kept as it is in a file name (a longer one is shortened and hashed, to fit NAME_MAX)."""
DATA_DIR = "data"
"""The folder of data files, shared by every conversation (content-addressed)."""


def safe_segment(value: str, what: str) -> str:
    """A single path segment for `value`; unsafe characters replaced, collisions avoided by a hash suffix."""
    if not value:
        raise UnsafePathError(f"{what} must not be empty")
    cleaned = _SAFE.sub("_", value).strip(".") or "_"
    if cleaned != value or len(cleaned) > _MAX_ID:
        # Two different ids must never share a file once cleaned (or shortened to fit a file name).
        cleaned = f"{cleaned[:80]}-{hashlib.sha256(value.encode()).hexdigest()[:10]}"
    return cleaned


def confine(reference: str, folder: str | None = None) -> str:
    """`reference` normalised, if it names a file inside `folder` or the shared data folder.

    `folder` is a conversation's folder (`sessions/{session}`); None allows anywhere under the
    workspace root. The path is normalised *before* it is checked, so `sessions/A/../B/x` is
    judged as `sessions/B/x`. A `#span` suffix is kept as it is. Raises `UnsafePathError`
    naming the reference for anything else: empty, NUL or control characters, too long,
    absolute, backslashes, or a normalised path outside the allowed folders.
    """
    path, hash_, span = reference.partition("#")
    why = _malformed(reference, path)
    if why is None:
        normal = posixpath.normpath(path)
        if normal == ".." or normal.startswith("../") or normal == ".":
            why = "leaves the workspace"
        elif folder is not None and not normal.startswith((f"{folder}/", f"{DATA_DIR}/")):
            why = f"is not a reference of this conversation (outside {folder}/ and {DATA_DIR}/)"
        else:
            return f"{normal}{hash_}{span}"
    shown = reference if len(reference) <= 200 else f"{reference[:200]}... ({len(reference)} characters)"
    raise UnsafePathError(f"reference {shown!r} {why}")


def _malformed(reference: str, path: str) -> str | None:
    """Why `reference` (whose path part is `path`) cannot name a file at all; None if it may."""
    if not path:
        return "names no file"
    if len(reference) > MAX_REFERENCE:
        return f"is longer than {MAX_REFERENCE} characters"
    if "\x00" in reference or _CONTROL.search(path):
        return "contains a NUL or control character"
    if path.startswith("/") or _DRIVE.match(path):
        return "is absolute"
    if "\\" in path:
        return "contains a backslash"
    if any(len(part.encode()) > _MAX_NAME for part in path.split("/")):
        return f"has a segment longer than {_MAX_NAME} bytes"
    return None


def split_reference(reference: str) -> tuple[str, str | None]:
    """A (confined) reference's path and its `#span` (None without one)."""
    path, hash_, span = reference.partition("#")
    return path, span if hash_ else None
