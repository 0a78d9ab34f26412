"""Requests from elsewhere: `Host`, `Origin`, the content type of a POST and the size of a body.

A page on another site can make the browser send a request to this server (a no-cors
`text/plain` POST needs no preflight) and, with DNS rebinding, even read its answers under
a name of the attacker's. So every HTTP request is checked, before anything else runs:

* `Host` must name the address the server is bound to: a loopback name or address when
  bound to loopback, the bound IP when bound to one, any IP literal when bound to every
  interface; names in `allowed_hosts` are accepted besides (`*` accepts any).
* `Origin`, when a browser sends one, must be this server itself or an allowed host.
* A POST, PUT or PATCH must declare a JSON body (`application/json` or `…+json`): 415 otherwise.
* A body longer than `max_body_bytes` is refused with 413 (declared or streamed).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["RequestGuard", "allowed_host"]

logger = logging.getLogger("contextkeep.server")

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class _TooLarge(Exception):
    """The body grew past the limit while the app read it."""


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _hostname(authority: str) -> str:
    """`authority` (`host[:port]`, `[v6]:port`) without its port, lowercased."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1:].partition("]")[0]
    host, _, port = authority.rpartition(":")
    return host if host and port.isdigit() else authority


def _listed(authority: str, allowed: Iterable[str]) -> bool:
    """Whether `authority` (or its host name) is in the allow-list (`*` lists every one).

    Entries are host names, `host:port` or origins (`https://host:port`).
    """
    listed = {a.strip().lower().partition("://")[2 if "://" in a else 0].rstrip("/") for a in allowed}
    return bool(
        {"*", authority.strip().lower(), _hostname(authority)} & (listed | {_hostname(a) for a in listed})
    )


def allowed_host(authority: str, bound: str, allowed: Iterable[str] = ()) -> bool:
    """Whether a request naming `authority` in `Host` may reach a server bound to `bound`."""
    if _listed(authority, allowed):
        return True
    name = _hostname(authority)
    bound = bound.strip("[]").lower()
    ip, bound_ip = _ip(name), _ip(bound)
    if bound in _LOOPBACK_NAMES or (bound_ip is not None and bound_ip.is_loopback):
        return name in _LOOPBACK_NAMES or (ip is not None and ip.is_loopback)
    if bound in _WILDCARDS:
        return ip is not None or name in _LOOPBACK_NAMES
    return name == bound or (ip is not None and ip == bound_ip)


def _json(content_type: str) -> bool:
    kind = content_type.partition(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _refusal(status: int, message: str) -> JSONResponse:
    # OpenAI's error shape: what the proxy's clients parse; the dashboard only reads the status.
    kind = "invalid_request_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": None}}, status)


class RequestGuard:
    """ASGI middleware enforcing the module's rules on every HTTP request."""

    def __init__(
        self, app: ASGIApp, *, bound: str, allowed_hosts: Iterable[str] = (), max_body_bytes: int
    ) -> None:
        self.app = app
        self.bound = bound
        self.allowed = tuple(allowed_hosts)
        self.max_body_bytes = max_body_bytes

    def _refused(self, scope: Scope, headers: Headers) -> JSONResponse | None:
        host = headers.get("host", "")
        if not allowed_host(host, self.bound, self.allowed):
            return _refusal(421, f"Host {host!r} is not this server (see --allow-host)")
        origin = headers.get("origin")
        if origin is not None:
            parts = urlsplit(origin)
            # Another origin is never this server's own address: only the allow-list admits it.
            if parts.netloc.lower() != host.lower() and not (
                parts.netloc and _listed(parts.netloc, self.allowed)
            ):
                return _refusal(403, f"requests from {origin!r} are refused (see --allow-host)")
        if scope["method"] in _BODY_METHODS and not _json(headers.get("content-type", "")):
            return _refusal(415, "the body must be JSON (Content-Type: application/json)")
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return _refusal(413, f"the body is larger than {self.max_body_bytes} bytes")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a refused request; pass the others on with their body counted."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refused(scope, Headers(scope=scope))
        if refusal is not None:
            logger.info("refused %s %s: %s", scope["method"], scope["path"], bytes(refusal.body).decode())
            await refusal(scope, receive, send)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body_bytes:
                raise _TooLarge
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if started:
                raise
            await _refusal(413, f"the body is larger than {self.max_body_bytes} bytes")(scope, receive, send)
