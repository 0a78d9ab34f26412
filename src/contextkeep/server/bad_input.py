"""Typed errors that mean the client sent something unusable answer 4xx with the reason, not 500.

An id that is too long or holds control characters, a message that is not valid, a history that
breaks round pairing, or a reference that names no file of the conversation: the engine raises
each as a typed error wherever it meets it (opening the session, adding, reading back); the
app turns them into the error body of the route's own API (OpenAI's under `/v1`).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from contextkeep._errors import (
    HistoryDivergedError,
    InvalidIdError,
    MalformedHistoryError,
    MessageFormatError,
    UnsafePathError,
)
from contextkeep.server._turn import openai_error

__all__ = ["BAD_INPUT", "install_bad_input_handlers"]

BAD_INPUT: dict[type[Exception], int] = {
    InvalidIdError: 400,
    MessageFormatError: 400,
    MalformedHistoryError: 400,
    UnsafePathError: 400,
    HistoryDivergedError: 409,
}
"""Each error class that is the client's to fix, and the status it answers."""


async def _refused(request: Request, exc: Exception) -> Response:
    status = next(code for kind, code in BAD_INPUT.items() if isinstance(exc, kind))
    if request.url.path.startswith("/v1/"):
        return openai_error(status, str(exc), type(exc).__name__)
    return JSONResponse({"detail": str(exc)}, status_code=status)


def install_bad_input_handlers(app: FastAPI) -> None:
    """Answer every error of `BAD_INPUT` with its status and the error's own message."""
    for kind in BAD_INPUT:
        app.add_exception_handler(kind, _refused)
