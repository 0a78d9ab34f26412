"""Asking an upstream once whether it has an API: an empty `POST` that a server with the endpoint refuses.

Nothing is billed (the body is not a request); the answer is kept per proxy and path, except a
refused key (401, 403), which says nothing about the path: it is asked again next time.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping

import httpx

from contextkeep.server.proxy import Proxy

__all__ = ["has_endpoint"]

logger = logging.getLogger("contextkeep.server")

_ANSWERS: weakref.WeakKeyDictionary[Proxy, dict[str, bool]] = weakref.WeakKeyDictionary()
_UNDECIDED = frozenset({401, 403})


async def has_endpoint(
    proxy: Proxy,
    headers: Mapping[str, str],
    path: str,
    has: Callable[[httpx.Response], bool],
    *,
    unreachable: bool,
) -> bool:
    """Whether the upstream has `path`, by `has` of its answer to an empty body (`unreachable` if none)."""
    known = _ANSWERS.setdefault(proxy, {})
    if path in known:
        return known[path]
    try:
        answer = await proxy.client.post(
            path, content=b"{}", headers={**headers, "content-type": "application/json"}
        )
    except httpx.HTTPError as exc:
        logger.info("could not ask the upstream whether it has /%s: %s", path, exc)
        return unreachable
    found = has(answer)
    if answer.status_code not in _UNDECIDED:
        known[path] = found
    logger.info(
        "the upstream %s /%s (it answered %d to an empty request)",
        "has" if found else "has no",
        path,
        answer.status_code,
    )
    return found
