"""A proxied request without `X-Conversation-Id` is managed under an id named after its history's head."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from contextkeep._config import ContextConfig
from contextkeep.server._derived_id import DerivedIds, derived_conversation_id
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support.proxy_fixtures import openai_client, served_proxy

SYSTEM = "You are a careful operations agent."


def step(body: Any) -> Reply:
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    return Reply(text=f"step {done}", tool_calls=[ToolCallSpec("read", {"n": done})])


def test_the_id_follows_the_stable_head_only():
    base = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Find the slow worker."}]
    first = derived_conversation_id(base)
    assert first is not None and first.startswith("derived-")
    later = [*base, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    assert derived_conversation_id(later) == first
    # The same head with a cache marker moved onto it, or as blocks: the same conversation.
    marked = [
        {
            "role": "system",
            "content": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        },
        {"role": "user", "content": [{"type": "text", "text": "Find the slow worker."}]},
    ]
    assert derived_conversation_id(marked) == first
    # Anthropic: the system parameter instead of a system message.
    assert derived_conversation_id(base[1:], SYSTEM) == first
    assert derived_conversation_id([base[0], {"role": "user", "content": "Another task."}]) != first
    assert derived_conversation_id(base[:1]) is None  # no user message: nothing stable to name
    # A role that is no string (any JSON may be posted) is no system message: no error either.
    odd = [{"role": ["system"], "content": SYSTEM}, {"role": {"x": 1}}, base[1]]
    assert derived_conversation_id(odd) == derived_conversation_id(base[1:])


def posted(body: bytes) -> Request:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({"type": "http", "method": "POST", "headers": [], "client": ("127.0.0.1", 1)}, receive)


async def test_a_chat_body_is_read_only_as_far_as_its_head():
    # The id depends on the first messages alone, so a re-sent history of any length costs
    # the same: a body whose tail no parser would accept still names its conversation.
    head = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Find the slow worker."}]
    body = json.dumps({"model": "m", "messages": [*head, {"role": "assistant", "content": "ok"}]}).encode()
    cut = body[: body.index(b'{"role": "assistant"')] + b'{"role": "assistant", "content": "unfini'
    ids = DerivedIds()
    assert await ids.of(posted(cut)) == derived_conversation_id(head)
    assert await ids.of(posted(json.dumps({"model": "m", "messages": head[:1]}).encode())) is None
    assert await ids.of(posted(b'{"model": "m", "messages": ["hi"]}')) is None
    assert await ids.of(posted(b'{"model": "m", "messages": [{"role": "user", "content": "x"')) is None
    assert await ids.of(posted(b"not json")) is None


@pytest.mark.slow
def test_a_client_without_an_id_is_managed_and_told_once(tmp_path, caplog):
    upstream = FakeLLMServer(context_window=16_384, responder=step)
    config = ContextConfig(min_keep_tokens=0)
    with upstream, served_proxy(tmp_path, upstream, window=16_384, config=config) as server:
        agent = openai_client(server)
        history: Any = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Go."}]
        with caplog.at_level(logging.INFO, logger="contextkeep.server"):
            for _ in range(3):
                reply = agent.chat.completions.create(model="fake-model", messages=history)
                message = reply.choices[0].message.model_dump(exclude_none=True)
                call = message["tool_calls"][0]["id"]
                history += [message, {"role": "tool", "tool_call_id": call, "content": "42"}]
        expected = derived_conversation_id(history)
        status = httpx.get(f"{server.url}/api/conversations/{expected}/status").json()
    assert status["messages"] == len(history) - 1  # every call landed in one conversation
    told = [r for r in caplog.records if "sends no X-Conversation-Id" in r.getMessage()]
    assert len(told) == 1 and expected in told[0].getMessage()
