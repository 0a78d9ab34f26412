"""Optional bearer-token protection of everything the server serves (API, events, dashboard).

Clients send ``Authorization: Bearer TOKEN``. A browser opens ``/?token=TOKEN`` once: the
server answers with an HttpOnly, SameSite=Strict cookie and redirects to ``/``, so the
dashboard's own requests and its EventSource (which cannot send headers) are authorized.
"""

from __future__ import annotations

import hmac
import ipaddress

from starlette.datastructures import Headers, QueryParams
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from contextkeep._errors import ConfigError

__all__ = ["COOKIE", "BearerAuth", "check_binding", "is_loopback"]

COOKIE = "contextkeep_token"


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts local connections."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuse to listen beyond this machine without a token."""
    if not token and not is_loopback(host):
        raise ConfigError("token", f"binding to {host!r} (not loopback) requires --token")


def _same(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class BearerAuth:
    """ASGI middleware: 401 for any HTTP request without the token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass HTTP requests that carry the token (header or cookie) on; answer 401 otherwise."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        scheme, _, given = headers.get("authorization", "").partition(" ")
        bearer = given.strip() if scheme.lower() == "bearer" else None
        cookie = _cookie(headers.get("cookie", ""))
        if _same(bearer, self.token) or _same(cookie, self.token):
            await self.app(scope, receive, send)
            return
        query = QueryParams(scope.get("query_string", b"").decode("latin-1"))
        response: Response
        if scope["path"] == "/" and _same(query.get("token"), self.token):
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
        else:
            response = JSONResponse(
                {"detail": "missing or wrong bearer token"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        await response(scope, receive, send)


def _cookie(header: str) -> str | None:
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    return None
