"""Turning ids into safe path segments, and references into safe paths."""

from __future__ import annotations

import hashlib
import posixpath
import re

from contextkeep._errors import UnsafePathError

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_segment(value: str, what: str) -> str:
    """A single path segment for `value`; unsafe characters replaced, collisions avoided by a hash suffix."""
    if not value:
        raise UnsafePathError(f"{what} must not be empty")
    cleaned = _SAFE.sub("_", value).strip(".") or "_"
    if cleaned != value:
        # Two different ids must never share a file once cleaned.
        cleaned = f"{cleaned[:80]}-{hashlib.sha256(value.encode()).hexdigest()[:10]}"
    return cleaned


def safe_relative(reference: str) -> str:
    """The relative path a reference names; raises `UnsafePathError` if it could leave the root."""
    path = reference.split("#", 1)[0]
    if not path or path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path) or "\\" in path:
        raise UnsafePathError(f"reference {reference!r} is not a path inside the workspace")
    normal = posixpath.normpath(path)
    if normal.startswith("..") or "/../" in f"/{normal}/" or normal == ".":
        raise UnsafePathError(f"reference {reference!r} leaves the workspace")
    return normal
