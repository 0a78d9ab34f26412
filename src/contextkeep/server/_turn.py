"""The pieces of one served proxy request: the turn it holds, and its errors in OpenAI's shapes."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi.responses import JSONResponse, Response

from contextkeep._errors import ContextKeepError, ContextOverflowError, StoreError
from contextkeep._session import Session
from contextkeep.server.upstream import UpstreamAdapter

__all__ = ["Turn", "openai_error"]


def openai_error(status: int, message: str, code: str | None = None) -> JSONResponse:
    """An error in OpenAI's body shape."""
    kind = "invalid_request_error" if status < 500 else "api_error"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status)


class _Replayed(JSONResponse):
    """The stored reply to a retried request, sent again without calling the upstream."""


@dataclass(slots=True)
class Turn:
    """One served request, from the conversation's lock taken to the reply remembered."""

    memory: Any
    """The conversation's memory of replies (for retries and idempotency keys)."""
    key: str | None
    """The request's `Idempotency-Key`, if any."""
    fields: dict[str, Any]
    """The request's fields other than its messages."""
    lock: asyncio.Lock
    """The conversation's lock, held until the reply is remembered (or the stream ends)."""
    session: Session
    """The session the request continues (a fork for a branch)."""
    before: int
    """The transcript's length before the request's new messages."""


def _failure(exc: Exception, adapter: UpstreamAdapter) -> Response:
    if adapter.failure is not None and not isinstance(exc, httpx.HTTPError):
        f = adapter.failure
        return Response(f.body, status_code=f.status, media_type=f.content_type)
    if isinstance(exc, httpx.HTTPError):
        return openai_error(502, f"upstream unreachable: {exc}", "upstream_unreachable")
    if isinstance(exc, ContextKeepError) and not isinstance(exc, StoreError):
        return openai_error(400, str(exc), _error_code(exc))
    raise exc


def _error_code(exc: ContextKeepError) -> str | None:
    """OpenAI's code for an overflow (a silent truncation included), so clients classify it as one."""
    overflow = exc if isinstance(exc, ContextOverflowError) else exc.__cause__
    return "context_length_exceeded" if isinstance(overflow, ContextOverflowError) else None


def _error_event(exc: ContextKeepError) -> bytes:
    """An error as a stream event, in the shape OpenAI sends one mid-stream."""
    error = {"message": str(exc), "type": "api_error", "param": None, "code": _error_code(exc)}
    return f"data: {json.dumps({'error': error})}\n\n".encode()
