"""Bad input through the server answers 4xx with the reason, and loses nothing stored (#19 point 8).

A 256-character conversation id, a 5,000-character tool-call id and a NUL in a reference
path each used to answer HTTP 500. The app is the real one (uvicorn, the SQLite store, a
local workspace), in front of the fake upstream.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from contextkeep._config import ContextConfig
from contextkeep.testing import FakeLLMServer
from support import call, result
from support.proxy_fixtures import StartProxy

HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a careful engineer."},
    {"role": "user", "content": "List the files."},
]


@pytest.fixture
def server(start_proxy: StartProxy) -> str:
    upstream = FakeLLMServer(context_window=8_000)
    config = ContextConfig(min_keep_tokens=0)
    return start_proxy(upstream, window=8_000, config=config, tokenizer="heuristic").url


def chat(url: str, conversation: str, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "fake-model", "messages": messages}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Conversation-Id": conversation})


def stored(url: str, conversation: str) -> list[str]:
    reply = httpx.get(f"{url}/api/conversations/{conversation}/messages")
    assert reply.status_code == 200, reply.text
    return [m.get("content") or "" for m in reply.json()["messages"]]


def assert_refused(reply: httpx.Response, *reasons: str) -> None:
    assert 400 <= reply.status_code < 500, (reply.status_code, reply.text)
    message = reply.json()["error"]["message"]
    for reason in reasons:
        assert reason in message, message


def test_a_256_character_conversation_id_is_a_400_naming_it(server: str) -> None:
    assert_refused(chat(server, "c" * 256, HISTORY), "conversation_id", "256 characters long, more than 200")
    assert chat(server, "c" * 200, HISTORY).status_code == 200  # the longest accepted


def test_a_5k_character_tool_call_id_is_a_400_and_the_conversation_goes_on(server: str) -> None:
    first = chat(server, "agent", HISTORY)
    assert first.status_code == 200, first.text
    history = [*HISTORY, first.json()["choices"][0]["message"]]
    before = stored(server, "agent")
    long_id = "k" * 5_000
    bad = [*history, {"role": "user", "content": "now run it"}, call(long_id), result(long_id, "x" * 500)]
    assert_refused(chat(server, "agent", bad), "tool_calls.id", "5000 characters long, more than 100")
    assert stored(server, "agent") == before  # nothing of the refused request was stored
    assert chat(server, "agent", [*history, {"role": "user", "content": "go on"}]).status_code == 200
    assert stored(server, "agent") == [*before, "go on", stored(server, "agent")[-1]]


def test_bad_text_and_deep_nesting_are_400s(server: str) -> None:
    # A lone surrogate escaped in the JSON (httpx would not encode the character itself).
    raw = '{"model": "fake-model", "messages": [{"role": "user", "content": "bad \\ud800 text"}]}'
    headers = {"X-Conversation-Id": "text", "content-type": "application/json"}
    reply = httpx.post(f"{server}/v1/chat/completions", content=raw, headers=headers)
    assert 400 <= reply.status_code < 500, (reply.status_code, reply.text)
    deep: Any = "leaf"
    for _ in range(80):
        deep = {"a": deep}
    nested = [*HISTORY, {"role": "user", "content": "x", "meta": deep}]
    assert_refused(chat(server, "deep", nested), "deeper than 64 levels")


def test_a_nul_in_a_reference_path_is_a_400(server: str) -> None:
    assert chat(server, "agent", HISTORY).status_code == 200
    reply = httpx.get(f"{server}/api/conversations/agent/references/sessions/agent/tool_result-c1%00.txt")
    assert 400 <= reply.status_code < 500, (reply.status_code, reply.text)
    assert "NUL" in reply.text or "null" in reply.text.lower()
