"""A worker spec on a store of its own, its conversation begun: the fixture of the SIGKILL store tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from support.shared import service_unavailable
from support.store_worker import SYSTEM, TASK, build_manager, drop, store_url, unreachable

__all__ = ["seeded_spec"]


@asynccontextmanager
async def seeded_spec(backend: str, tag: str, tmp_path: Path, **fields: Any) -> AsyncIterator[dict[str, Any]]:
    """A worker spec (`fields` added) on tables / keys of its own; skips if `backend`'s server is unreachable.

    The conversation holds SYSTEM and TASK; the tables are dropped at the end.
    """
    if backend != "sqlite" and (reason := unreachable(backend)):
        service_unavailable(backend, reason)
    prefix = f"{tag}{uuid.uuid4().hex[:10]}"
    url = store_url(backend, prefix, tmp_path)
    spec: dict[str, Any] = {
        "store": url,
        "workspace": str(tmp_path / "ws"),
        "summaries": str(tmp_path / "summaries.jsonl"),
        "conversation": f"conv-{prefix}",
        **fields,
    }
    cm = build_manager(spec)
    async with cm.session(spec["conversation"]) as s:
        await s.add([SYSTEM, TASK])
    await cm.close()
    try:
        yield spec
    finally:
        await drop(url)
