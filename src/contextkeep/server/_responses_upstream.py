"""The proxy's model adapter for an upstream that speaks OpenAI Responses (`POST {upstream}/responses`).

The view goes out as Responses input items (:func:`~contextkeep._formats.responses_items.view_items`:
what compaction left unchanged exactly as it came, reasoning items with their
`encrypted_content` included), with the request's other fields as the client sent them
(`tools` of any kind, `reasoning`, `include`, `store`, `text`, …). The reply comes back to
the client as the upstream sent it: the `response` object, or streamed, every event as it
arrives; the reply recorded is the `output` of the response (the completed event's, streamed).

Which API the upstream speaks is the server's `upstream_api` setting; `auto` asks the
upstream once: an empty `POST responses` that a Responses upstream refuses as a bad request
(400 or 422, nothing billed) and a chat-only one answers 404.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextkeep._formats.openai import from_openai
from contextkeep._formats.responses_items import reply_history, view_items
from contextkeep._messages import Message
from contextkeep._usage import Usage
from contextkeep.models.adapter import ModelReply
from contextkeep.server._probe import has_endpoint
from contextkeep.server.proxy import Proxy
from contextkeep.server.upstream import STARTED, UpstreamAdapter, UpstreamError, call_body

__all__ = ["ResponsesPassthrough", "responses_error_event", "speaks_responses"]

logger = logging.getLogger("contextkeep.server")

_REFUSED_BODY = frozenset({400, 422})
"""What a server with the endpoint answers to an empty body."""
_FINAL = frozenset({"response.completed", "response.incomplete"})
_FAILED = frozenset({"error", "response.failed"})


async def speaks_responses(proxy: Proxy, headers: Mapping[str, str], setting: str) -> bool:
    """Whether `/v1/responses` goes upstream as Responses: the setting, or (`auto`) the upstream's answer."""
    if setting != "auto":
        return setting == "responses"
    return await has_endpoint(
        proxy, headers, "responses", lambda answer: answer.status_code in _REFUSED_BODY, unreachable=False
    )


def responses_error_event(exc: Exception) -> bytes:
    """A failure after the stream started, as the `error` event of a Responses stream."""
    message = f"the proxied response failed: {exc}"
    error = {"type": "error", "code": "api_error", "message": message, "param": None}
    return f"event: error\ndata: {json.dumps(error)}\n\n".encode()


def reply_of(data: Mapping[str, Any]) -> tuple[dict[str, Any], ModelReply]:
    """A `response` object's output as one assistant chat message (carrying its items) and a model reply."""
    said = reply_history(data.get("output") or [])
    usage = data.get("usage") or {}
    details = usage.get("input_tokens_details") or {}
    incomplete = (data.get("incomplete_details") or {}).get("reason")
    return said, ModelReply(
        message=from_openai([said])[0],
        usage=Usage(
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            total_tokens=usage.get("total_tokens"),
            cached_tokens=details.get("cached_tokens"),
        ),
        finish_reason="length" if incomplete == "max_output_tokens" else data.get("status"),
        model=data.get("model"),
        raw=dict(data),
    )


@dataclass
class ResponsesPassthrough(UpstreamAdapter):
    """Sends views to a Responses upstream for one proxied request."""

    on_reply: Callable[[str, dict[str, Any]], None] | None = None
    """Called with each completed response's id and its output as a chat message (for the next request)."""

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        local_prompt_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        """Send the view as input items with the request's other fields; errors as the parent's."""
        instructions, items = view_items(messages)
        body = call_body(
            options, tools, ("max_output_tokens", max_tokens), instructions=instructions, input=items
        )
        self.calling(messages, local_prompt_tokens)
        if self.sink is None:
            data = await self._one(body)
        else:
            data = await self._events({**body, "stream": True}, self.sink)
        said, reply = reply_of(data)
        reply = self.checked(reply, local_prompt_tokens)
        if self.on_reply is not None:
            self.on_reply(str(data.get("id")), said)
        return reply

    async def _one(self, body: Mapping[str, Any]) -> dict[str, Any]:
        headers = {**self.headers, "content-type": "application/json"}
        response = await self.client.post("responses", content=json.dumps(body).encode(), headers=headers)
        if response.status_code != 200:
            raise self._refused(response.status_code, response.content, response.headers)
        self.response = response.json()
        return self.response

    async def _events(self, body: Mapping[str, Any], sink: Callable[[bytes], None]) -> dict[str, Any]:
        headers = {**self.headers, "content-type": "application/json"}
        request = self.client.build_request(
            "POST", "responses", content=json.dumps(body).encode(), headers=headers
        )
        response = await self.client.send(request, stream=True)
        final: dict[str, Any] | None = None
        try:
            if response.status_code != 200:
                raise self._refused(response.status_code, await response.aread(), response.headers)
            started, name = False, ""
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    name = line[6:].strip()
                    continue
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if name in _FAILED and not started:  # the client gets it as the upstream's refusal
                    raise self._refused(400, payload.encode(), response.headers)
                if not started:
                    sink(STARTED)
                    started = True
                sink(f"event: {name}\ndata: {payload}\n\n".encode())
                if name in _FAILED:  # mid-stream: the client has it; nothing is recorded
                    raise self._refused(200, payload.encode(), response.headers)
                if name in _FINAL:
                    final = json.loads(payload)["response"]
        finally:
            await response.aclose()
        if final is None:
            raise UpstreamError("the upstream's Responses stream ended before the response completed")
        return final
