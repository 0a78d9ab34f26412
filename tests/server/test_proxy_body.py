"""What the proxy sends upstream and back when a client re-sends its growing history.

The view's encoding is reused from one request to the next while it only grows; the
upstream must still get exactly the history the client sent, and a branch (an edited
message) its own history.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer, Reply
from support.proxy_fixtures import bodies_sent

WINDOW = 1_000_000
"""No compaction: the view is the history as sent."""


def answer(body: Mapping[str, Any]) -> Reply:
    """A reply of its own to each question (alike replies would let a branch continue another)."""
    return Reply(text=f"answer to {body['messages'][-1]['content']}")


@pytest.fixture
def proxy(start_proxy):
    upstream = FakeLLMServer(context_window=WINDOW, responder=answer)
    server = start_proxy(upstream, window=WINDOW, tokenizer="heuristic")
    with httpx.Client(timeout=20) as client:
        yield server, upstream, client


def chat(client: httpx.Client, server: BackgroundServer, body: dict[str, Any]) -> httpx.Response:
    headers = {"content-type": "application/json", "x-conversation-id": "body-1"}
    response = client.post(f"{server.url}/v1/chat/completions", content=json.dumps(body), headers=headers)
    response.raise_for_status()
    return response


def sent(upstream: FakeLLMServer) -> dict[str, Any]:
    return bodies_sent(upstream, "/v1/chat/completions")[-1]


def test_each_request_sends_the_history_as_the_client_sent_it(proxy):
    server, upstream, client = proxy
    history: list[dict[str, Any]] = [{"role": "system", "content": 'Be brief. «quoted» "text"'}]
    for step in range(6):
        history.append({"role": "user", "content": f"question {step}\nwith a newline and é"})
        reply = chat(client, server, {"model": "fake-model", "messages": history, "temperature": 0.5})
        assert sent(upstream)["messages"] == history
        assert sent(upstream)["temperature"] == 0.5
        history.append(reply.json()["choices"][0]["message"])
    edited = [*history[:-2], {"role": "user", "content": "an edited question"}]
    chat(client, server, {"model": "fake-model", "messages": edited})  # a branch: served in a fork
    assert sent(upstream)["messages"] == edited
    history.append({"role": "user", "content": "back on the first branch"})
    chat(client, server, {"model": "fake-model", "messages": history})
    assert sent(upstream)["messages"] == history


def test_a_number_beyond_64_bits_is_forwarded_as_sent(proxy):
    server, upstream, client = proxy
    big = 2**70  # beyond what the fast JSON parser reads: the request is parsed the slower way
    messages = [{"role": "user", "content": "hi"}]
    chat(client, server, {"model": "fake-model", "messages": messages, "metadata": {"n": big}})
    assert sent(upstream)["metadata"] == {"n": big}
    assert sent(upstream)["messages"] == messages
