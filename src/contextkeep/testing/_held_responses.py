"""The fake server's `/v1/responses` conversations: each answer held by id for `previous_response_id`."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from contextkeep.testing._errors import invalid_request
from contextkeep.testing._http import HTTPResponse
from contextkeep.testing._replies import Completion
from contextkeep.testing._responses import response_events, response_object

__all__ = ["HeldResponses"]


class HeldResponses:
    """Every response answered, with its whole input and output items, so a later request continues it."""

    def __init__(self) -> None:
        self._held: dict[str, list[Any]] = {}  # response id → its whole input and output items
        self._lock = threading.Lock()

    def input_of(self, body: Any) -> list[Any] | HTTPResponse:
        """A request's whole input (the previous response's items first), or the error it is answered."""
        if not isinstance(body, dict) or not body.get("model") or body.get("input") is None:
            return HTTPResponse(*invalid_request("openai", "Missing required parameter: 'model' or 'input'."))
        raw = body["input"]
        items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else list(raw)
        previous = body.get("previous_response_id")
        if previous is None:
            return items
        with self._lock:
            held = self._held.get(previous)
        if held is None:
            return HTTPResponse(
                *invalid_request("openai", f"Previous response with id '{previous}' not found.")
            )
        return [*held, *items]

    def answer(self, c: Completion, body: Mapping[str, Any], items: list[Any], stream: bool) -> HTTPResponse:
        """`c` as a Responses answer to a request of input `items`, held under its id."""
        final = response_object(c, body)
        with self._lock:  # its id may come back as a `previous_response_id`
            self._held[final["id"]] = [*items, *final["output"]]
        return HTTPResponse(events=response_events(c, body)) if stream else HTTPResponse(200, final)

    def clear(self) -> None:
        """Forget every response held."""
        with self._lock:
            self._held.clear()
