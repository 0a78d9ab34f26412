"""A conversation id for a proxied request that names none: the hash of its history's stable head.

Tools that cannot send `X-Conversation-Id` (most agents pointed at a base URL) still
re-send the same beginning on every call: the system prompt and the first user message.
Their hash names the conversation, so such a request is managed like any other:

    derived-<first 16 hex digits of sha256(system, first user message)>

The system part is every system (or `developer`) message before the first user message,
or the Anthropic `system` parameter. Both parts are compared as content blocks (a string
is one text block) without `cache_control` markers, which clients move from call to call.
A request with no user message is passed through unmanaged.

Two runs that start alike (same system prompt, same first question) share the id; where
their histories part, the second continues in a fork of the conversation, as an edited
history does (see `Proxy`). The first time a client (its address and `User-Agent`) sends
no id, the server logs that ids are derived for it, once.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Final

from fastapi import Request

from contextkeep.server._raw_span import find_start, objects

__all__ = ["DerivedIds", "derived_conversation_id"]

logger = logging.getLogger("contextkeep.server")

_PREFIX: Final = "derived-"
_SYSTEM_ROLES: Final = frozenset({"system", "developer"})
_CLIENTS_KEPT: Final = 4096


def _blocks(content: Any) -> Any:
    """`content` as blocks, `cache_control` left out at every depth."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [_blocks(item) if isinstance(item, list) else _bare(item) for item in content]
    return _bare(content)


def _bare(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _bare(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_bare(v) for v in value]
    return value


def derived_conversation_id(messages: Iterable[Any], system: Any = None) -> str | None:
    """The id named after the system part and the first user message; None without a user message."""
    head: list[Any] = [] if system is None else [_blocks(system)]
    for m in messages:
        if not isinstance(m, dict):
            return None
        role = m.get("role")
        if role == "user":
            head.append(_blocks(m.get("content")))
            digest = hashlib.sha256(json.dumps(head, sort_keys=True, ensure_ascii=False).encode())
            return _PREFIX + digest.hexdigest()[:16]
        if isinstance(role, str) and role in _SYSTEM_ROLES:  # any JSON may come: a list is no role
            head.append(_blocks(m.get("content")))
    return None


class DerivedIds:
    """Derives ids for requests that name none, and logs it once per client."""

    def __init__(self) -> None:
        self._told: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def of(self, request: Request) -> str | None:
        """The id for `request`'s JSON chat body, or None; reads only the body's head.

        A client re-sends its whole history on every call, but the id depends only on its
        first messages: they are parsed one by one as far as the first user message, so the
        cost does not grow with the history.
        """
        body = await request.body()
        start = find_start(body)
        if start is None:
            return None
        head = (json.loads(body[begin:end]) for begin, end in objects(body, start))
        try:
            return self.of_messages(request, head)
        except ValueError:  # not JSON as far as the head: the parser's verdict is the upstream's
            return None

    def of_messages(self, request: Request, messages: Iterable[Any], system: Any = None) -> str | None:
        """The id for `request`, whose history is `messages` (and `system`), or None."""
        found = derived_conversation_id(messages, system)
        if found is not None:
            self._tell(request, found)
        return found

    def _tell(self, request: Request, conversation_id: str) -> None:
        client = (request.client.host if request.client else "?", request.headers.get("user-agent", ""))
        if client in self._told:
            return
        self._told[client] = None
        while len(self._told) > _CLIENTS_KEPT:
            self._told.popitem(last=False)
        logger.info(
            "%s (%s) sends no X-Conversation-Id: its conversations are named after their system prompt "
            "and first user message (this one: %s)",
            client[0],
            client[1] or "no User-Agent",
            conversation_id,
        )
