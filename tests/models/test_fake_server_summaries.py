"""The fake LLM server's summary requests and their failure modes."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import anthropic
import openai
import pytest

from contextkeep.testing import DEFAULT_SUMMARY_MARKER, SUMMARY_FIELDS, FakeLLMServer, Reply
from support import fake_server
from support.fake_server import USER, claude, oai

# The shared fixture; bound to a name here so pytest finds it in this module.
srv = fake_server.srv


TRANSCRIPT = [
    {"role": "system", "content": f"Summarise the conversation. {DEFAULT_SUMMARY_MARKER}"},
    {"role": "user", "content": "Fix the failing test in tests/test_io.py\nIt crashes on empty input."},
    {"role": "assistant", "content": "I read src/pkg/io.py and found the bug."},
    {"role": "user", "content": "Now update README.md too."},
]


def summary_json(client: openai.OpenAI, messages: Any = TRANSCRIPT) -> str:
    reply = client.chat.completions.create(model="m", messages=messages)
    return reply.choices[0].message.content or ""


def test_summary_request_returns_five_field_json_and_leaves_queue() -> None:
    with FakeLLMServer(replies=["scripted"]) as server:
        summary = json.loads(summary_json(oai(server)))
        normal = oai(server).chat.completions.create(model="m", messages=USER)
    assert tuple(summary) == SUMMARY_FIELDS
    assert summary["task_overview"] == "Fix the failing test in tests/test_io.py"
    assert "Now update README.md too." in summary["current_state"]
    for path in ("tests/test_io.py", "src/pkg/io.py", "README.md"):
        assert path in summary["important_discoveries"]
    assert normal.choices[0].message.content == "scripted"


def test_summary_marker_in_last_user_message_and_custom_marker() -> None:
    with FakeLLMServer(summary_marker="[[SUM]]") as server:
        asked = [{"role": "user", "content": "history...\n[[SUM]] please summarise"}]
        assert set(json.loads(summary_json(oai(server), asked))) == set(SUMMARY_FIELDS)
        earlier = [{"role": "user", "content": "[[SUM]]"}, {"role": "user", "content": "hi"}]
        assert summary_json(oai(server), earlier) == "ok"


def test_summary_responder_overrides_the_builder() -> None:
    with FakeLLMServer(summary_responder=lambda body: Reply(text="custom")) as server:
        assert summary_json(oai(server)) == "custom"


def test_summary_failure_kinds_and_runtime_switch(srv: FakeLLMServer) -> None:
    srv.context_window = 10_000
    client = oai(srv)
    srv.summary_failure = "malformed_json"
    with pytest.raises(json.JSONDecodeError):
        json.loads(summary_json(client))
    srv.summary_failure = "empty"
    assert summary_json(client) == ""
    srv.summary_failure = "http_500"
    with pytest.raises(openai.InternalServerError) as caught:
        summary_json(client)
    assert caught.value.status_code == 500
    assert caught.value.body == {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert oai(srv).chat.completions.create(model="m", messages=USER)  # normal calls unaffected
    srv.summary_failure = None
    assert set(json.loads(summary_json(client))) == set(SUMMARY_FIELDS)


def test_summary_timeout_trips_the_client_timeout() -> None:
    threads = threading.active_count()
    server = FakeLLMServer(summary_failure="timeout", timeout_seconds=3)
    with server, pytest.raises(openai.APITimeoutError):
        summary_json(oai(server, timeout=0.2))
    # stop() ends the 3 s stall, so the stalled handler thread is gone well before that.
    deadline = time.monotonic() + 1
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= threads


def test_fail_next_summaries_only_for_count(srv: FakeLLMServer) -> None:
    srv.context_window = 10_000
    srv.fail_next_summaries("http_500", 2)
    client = oai(srv)
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            summary_json(client)
    assert set(json.loads(summary_json(client))) == set(SUMMARY_FIELDS)


def test_anthropic_summary_500_is_anthropic_shaped(srv: FakeLLMServer) -> None:
    srv.context_window = 10_000
    srv.fail_next_summaries("http_500")
    with pytest.raises(anthropic.InternalServerError) as caught:
        claude(srv).messages.create(model="c", max_tokens=100, system=DEFAULT_SUMMARY_MARKER, messages=USER)
    assert caught.value.response.json() == {
        "type": "error",
        "error": {"type": "api_error", "message": "Internal server error"},
    }
