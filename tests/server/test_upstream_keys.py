"""Whose key goes where: the client's key reaches the configured upstream only, and is never logged."""

from __future__ import annotations

import logging
from typing import Any

import httpx

from contextkeep.testing import FakeLLMServer
from support.proxy_fixtures import served_proxy

CLIENT_KEY = "sk-client-own-key-123"
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hello"}]}


def model_calls(upstream: FakeLLMServer) -> list[Any]:
    return [r for r in upstream.requests if r.path == "/v1/chat/completions"]


def test_the_clients_key_reaches_the_upstream_and_no_log(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    upstream = FakeLLMServer(context_window=4_096)
    with upstream, served_proxy(tmp_path, upstream, window=4_096) as server:
        key = {"authorization": f"Bearer {CLIENT_KEY}"}
        url = f"{server.url}/v1/chat/completions"
        assert httpx.post(url, json=CHAT, headers=key).status_code == 200  # passed through
        managed = {**key, "x-conversation-id": "keyed"}
        assert httpx.post(url, json=CHAT, headers=managed).status_code == 200
        upstream.fail_next(500)  # an upstream failure is logged: the key is not in it
        assert httpx.post(url, json=CHAT, headers=managed).status_code == 500
    calls = model_calls(upstream)
    assert len(calls) == 3
    assert all(c.headers["authorization"] == f"Bearer {CLIENT_KEY}" for c in calls)
    assert CLIENT_KEY not in caplog.text


def test_the_servers_own_token_and_key_replace_the_clients(tmp_path):
    upstream = FakeLLMServer(context_window=4_096)
    keys = {"token": "dashboard-token", "upstream_api_key": "sk-server"}
    with upstream, served_proxy(tmp_path, upstream, window=4_096, **keys) as server:
        url = f"{server.url}/v1/chat/completions"
        bearer = {"authorization": "Bearer dashboard-token"}
        assert httpx.post(url, json=CHAT).status_code == 401
        assert httpx.post(url, json=CHAT, headers=bearer).status_code == 200
        managed = {**bearer, "x-conversation-id": "keyed"}
        assert httpx.post(url, json=CHAT, headers=managed).status_code == 200
    sent = [c.headers.get("authorization") for c in model_calls(upstream)]
    assert sent == ["Bearer sk-server", "Bearer sk-server"]  # the dashboard's token never leaves
