"""Requests from elsewhere, over real HTTP: other origins, other Host names, big bodies, slow heads."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from uvicorn.protocols.http.h11_impl import H11Protocol

from contextkeep.server import connections
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer
from support.proxy_fixtures import StartProxy, chat_calls

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hello"}]}
SERVER_KEY = "sk-server-secret"


@pytest.fixture
def served(start_proxy: StartProxy):
    upstream = FakeLLMServer(context_window=4_096)

    def start(**limits: Any) -> BackgroundServer:
        return start_proxy(upstream, upstream_api_key=SERVER_KEY, window=4_096, **limits)

    return start, upstream


def post(server: BackgroundServer, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", content=body, headers=headers, timeout=20)


def test_a_page_on_another_origin_cannot_make_the_proxy_call_the_upstream(served):
    start, upstream = served
    server = start()
    body = json.dumps(CHAT).encode()
    # What a no-cors fetch or a form sends: a "simple" content type, the page's own Origin.
    simple = post(server, body, **{"content-type": "text/plain", "origin": "http://evil.example"})
    assert simple.status_code in (403, 415)
    assert post(server, body, **{"content-type": "text/plain;charset=UTF-8"}).status_code == 415
    foreign = post(server, body, **{"content-type": "application/json", "origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert "evil.example" in foreign.json()["error"]["message"]
    assert chat_calls(upstream) == 0
    # The same request from a client that is not a foreign page goes through, with the server's key.
    own_origin = {"content-type": "application/json", "origin": server.url}
    assert post(server, body, **own_origin).status_code == 200
    assert post(server, body, **{"content-type": "application/json"}).status_code == 200
    assert chat_calls(upstream) == 2
    assert upstream.requests[-1].headers["authorization"] == f"Bearer {SERVER_KEY}"


def test_a_host_name_that_is_not_the_server_is_refused(served):
    start, _ = served
    server = start()
    health = f"{server.url}/api/health"
    for rebound in (f"rebind.example:{server.port}", "evil.example", f"192.168.1.9:{server.port}"):
        refused = httpx.get(health, headers={"host": rebound})
        assert refused.status_code == 421, rebound
        assert "ok" not in refused.json()
    for local in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", "localhost"):
        assert httpx.get(health, headers={"host": local}).json()["ok"] is True
    allowing = start(allowed_hosts=("dash.example", "https://app.example:3000"))
    health = f"{allowing.url}/api/health"
    assert httpx.get(health, headers={"host": f"dash.example:{allowing.port}"}).json()["ok"] is True
    assert httpx.get(health, headers={"host": "other.example"}).status_code == 421
    allowed_page = {"content-type": "application/json", "origin": "https://dash.example"}
    assert post(allowing, json.dumps(CHAT).encode(), **allowed_page).status_code == 200
    listed_origin = {"content-type": "application/json", "origin": "https://app.example:3000"}
    assert post(allowing, json.dumps(CHAT).encode(), **listed_origin).status_code == 200


def test_a_body_over_the_limit_is_refused_before_the_upstream(served):
    start, upstream = served
    server = start(max_body_bytes=2_000)
    big = dict(CHAT, messages=[{"role": "user", "content": "x" * 5_000}])
    body = json.dumps(big).encode()
    headers = {"content-type": "application/json", "x-conversation-id": "big"}
    declared = post(server, body, **headers)
    assert declared.status_code == 413
    assert "2000 bytes" in declared.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams in
        for i in range(0, len(body), 500):
            yield body[i : i + 500]

    streamed = httpx.post(f"{server.url}/v1/chat/completions", content=chunks(), headers=headers, timeout=20)
    assert streamed.status_code == 413
    assert chat_calls(upstream) == 0
    small = post(server, json.dumps(CHAT).encode(), **headers)
    assert small.status_code == 200


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes the connection (rather than waiting for the rest for ever)."""
    sock.settimeout(30)
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_a_client_sending_its_request_head_slowly_is_cut_off(served, monkeypatch, parser):
    if parser == "h11":  # a server installed without httptools
        monkeypatch.setattr(connections, "HttpToolsProtocol", None)
    assert issubclass(connections.head_deadline(0.5), H11Protocol) is (parser == "h11")
    start, _ = served
    server = start(header_timeout=0.5)
    head = f"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nUser-Agent: slow".encode()
    with socket.create_connection((server.host, server.port)) as slow:
        for byte in head[:40]:  # a byte now and then, then nothing more
            slow.send(bytes([byte]))
            time.sleep(0.005)
        assert _closed_by_server(slow)
    with socket.create_connection((server.host, server.port)) as silent:  # connects, never sends
        assert _closed_by_server(silent)
    assert httpx.get(f"{server.url}/api/health").json()["ok"] is True  # others are served meanwhile
