"""The proxy's memory is bounded: idle conversations are evicted and resume identically from the store."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from contextkeep._config import ContextConfig
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer
from support import wait_until
from support.proxy_fixtures import served_proxy

WINDOW = 1_500
CONVERSATIONS, TURNS, CAP = 8, 6, 3


def serve(tmp_path, name: str, upstream: FakeLLMServer, **limits) -> BackgroundServer:
    return served_proxy(
        tmp_path / name,
        upstream,
        window=WINDOW,
        config=ContextConfig(min_keep_tokens=0, reserved_tokens=200),
        **limits,
    )


def kept(server: BackgroundServer):
    return server._server._app.state.ck.proxy.kept


def run(server: BackgroundServer, upstream: FakeLLMServer) -> list[list[dict[str, Any]]]:
    """Every conversation advanced one turn at a time, round robin; what the upstream saw per turn."""
    histories: dict[str, list[dict[str, Any]]] = {f"c{i}": [] for i in range(CONVERSATIONS)}
    seen = []
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for turn in range(TURNS):
            for conversation, history in histories.items():
                text = f"{conversation} turn {turn}: " + " ".join(f"w{turn}-{k}" for k in range(120))
                history.append({"role": "user", "content": text})
                answer = client.post(
                    "/v1/chat/completions",
                    json={"model": "fake-model", "messages": history, "max_tokens": 50},
                    headers={"X-Conversation-Id": conversation},
                )
                assert answer.status_code == 200, answer.text
                history.append(answer.json()["choices"][0]["message"])
                seen.append(upstream.requests[-1].body["messages"])
    return seen


@pytest.mark.slow
def test_idle_conversations_are_evicted_and_resume_identically(tmp_path):
    with FakeLLMServer(context_window=WINDOW) as upstream:
        with serve(tmp_path, "reference", upstream) as reference:
            expected = run(reference, upstream)
            assert len(kept(reference)) == CONVERSATIONS  # the default keeps them all
        upstream.reset()
        with serve(tmp_path, "bounded", upstream, max_conversations=CAP) as bounded:
            got = run(bounded, upstream)
            assert len(kept(bounded)) <= CAP
            # Round robin over more conversations than kept: each is evicted between its turns,
            # taking its call history along; the last one served holds its latest call.
            assert httpx.get(f"{bounded.url}/api/conversations/c0/calls").json() == []
            assert len(httpx.get(f"{bounded.url}/api/conversations/c7/calls").json()) == 1
    # Every turn of every conversation after an eviction sent the upstream the same view.
    assert got == expected
    assert any(len(m) < 2 * TURNS for m in expected)  # compaction did shape the views


def test_conversations_idle_past_the_timeout_are_evicted(tmp_path):
    with (
        FakeLLMServer(context_window=WINDOW) as upstream,
        serve(tmp_path, "ttl", upstream, idle_seconds=0.2) as server,
    ):
        answer = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]},
            headers={"X-Conversation-Id": "short-lived"},
        )
        assert answer.status_code == 200
        assert len(kept(server)) <= 1
        asyncio.run(wait_until(lambda: len(kept(server)) == 0, timeout=10))
