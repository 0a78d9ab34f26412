"""The upstream's other endpoints, proxied unchanged: `GET /v1/models` (with the served window) and the rest.

Only the endpoints that carry a conversation (`/v1/chat/completions`, `/v1/messages`,
`/v1/responses`) are managed. Every other path under `/v1/` goes to the same path under the upstream's
base URL with its method, query, headers (hop-by-hop ones dropped, authorization as for a
managed call: the configured key, else the client's own) and body, and its answer comes
back with its status, headers and body as they are (streamed). A path the upstream does
not have gets the upstream's own answer, not a 405 from the dashboard's files.

`GET /v1/models` is the upstream's list with, on the entry of the model the proxy budgets
for, `context_window` (the window its views are built to fit) and `context_window_source`
(`explicit`, `upstream`, `registry`, …), when the window is known.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from contextkeep.server._turn import openai_error
from contextkeep.server.proxy import Proxy

__all__ = ["router"]

logger = logging.getLogger("contextkeep.server")

_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
"""RFC 9110 §7.6.1: headers meant for one connection, never forwarded."""
_RECOMPUTED: Final = frozenset({"host", "content-length"})
"""Set again by the client library for the upstream connection."""
_METHODS: Final = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def _end_to_end(headers: Mapping[str, str], also: frozenset[str] = frozenset()) -> dict[str, str]:
    """`headers` without hop-by-hop ones (those the `Connection` header names included) and `also`."""
    named = {h.strip().lower() for h in headers.get("connection", "").split(",") if h.strip()}
    dropped = _HOP_BY_HOP | named | also
    return {k: v for k, v in headers.items() if k.lower() not in dropped}


def forwarded_headers(proxy: Proxy, request: Request) -> dict[str, str]:
    """The client's headers for the upstream, authorization decided as for a managed call."""
    out = _end_to_end(request.headers, _RECOMPUTED | {"authorization"})
    authorization = proxy._headers(request).get("authorization")
    if authorization is not None:
        out["authorization"] = authorization
    return out


async def _send(proxy: Proxy, request: Request, path: str) -> httpx.Response | Response:
    """The upstream's streamed answer to `request` at `path`, or a 502 when it cannot be reached."""
    upstream = proxy.client.build_request(
        request.method,
        path,
        params=request.url.query or None,
        content=await request.body(),
        headers=forwarded_headers(proxy, request),
    )
    try:
        return await proxy.client.send(upstream, stream=True)
    except httpx.HTTPError as exc:
        return openai_error(502, f"upstream unreachable: {exc}", "upstream_unreachable")


def _proxy_of(request: Request) -> Proxy | Response:
    proxy: Proxy | None = request.app.state.ck.proxy
    if proxy is None:
        return openai_error(404, "proxy mode is off: start `contextkeep serve --upstream URL`")
    return proxy


router = APIRouter(tags=["proxy"])


@router.get("/v1/models", summary="The upstream's models, with the window the proxy serves")
async def models(request: Request) -> Response:
    """The upstream's `/v1/models`, the budgeted model's entry carrying `context_window`."""
    proxy = _proxy_of(request)
    if isinstance(proxy, Response):
        return proxy
    await proxy.use_upstream_window(proxy._headers(request))
    answer = await _send(proxy, request, "models")
    if isinstance(answer, Response):
        return answer
    try:
        raw = await answer.aread()
    finally:
        await answer.aclose()
    headers = _end_to_end(answer.headers, frozenset({"content-length", "content-encoding"}))
    body = _with_window(raw, proxy) if answer.status_code == 200 else None
    if body is None:
        return Response(raw, status_code=answer.status_code, headers=headers)
    return JSONResponse(body, status_code=200, headers=headers)


def _with_window(raw: bytes, proxy: Proxy) -> Any:
    """The parsed model list with the served window on the budgeted model; None when not a list."""
    try:
        listing = json.loads(raw)
    except ValueError:
        return None
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list):
        return None
    spec = proxy.manager.model
    if spec.context_window is not None:
        for entry in entries:
            if isinstance(entry, dict) and entry.get("id") == spec.key:
                entry["context_window"] = spec.context_window
                entry["context_window_source"] = spec.source.value
    return listing


@router.api_route("/v1/{path:path}", methods=_METHODS, include_in_schema=False)
async def unchanged(request: Request, path: str) -> Response:
    """Any other upstream endpoint: forwarded as sent, answered as the upstream answers."""
    proxy = _proxy_of(request)
    if isinstance(proxy, Response):
        return proxy
    answer = await _send(proxy, request, path)
    if isinstance(answer, Response):
        return answer
    logger.debug("%s /v1/%s passed through: %d", request.method, path, answer.status_code)
    return StreamingResponse(
        answer.aiter_raw(),
        status_code=answer.status_code,
        headers=_end_to_end(answer.headers, frozenset({"content-length"})),
        background=BackgroundTask(answer.aclose),
    )
