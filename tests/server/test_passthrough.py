"""The upstream's other endpoints through the proxy: the model list with the served window, the rest unchanged."""

from __future__ import annotations

import httpx
import pytest

from contextkeep.testing import FakeLLMServer
from support.proxy_fixtures import openai_client

WINDOW = 16_384


@pytest.fixture
def served(start_proxy):
    upstream = FakeLLMServer(model="fake-model", context_window=WINDOW)
    return start_proxy(upstream), upstream  # no window: the proxy asks the upstream's model list


@pytest.mark.slow
def test_model_list_comes_from_the_upstream_with_the_served_window(served):
    server, upstream = served
    client = openai_client(server, api_key="sk-client")
    models = client.models.list()
    [entry] = models.data
    assert entry.id == "fake-model"
    extra = entry.model_extra or {}
    assert extra["max_model_len"] == WINDOW  # the upstream's own fields kept
    assert extra["context_window"] == WINDOW
    assert extra["context_window_source"] == "upstream"
    asked = [r for r in upstream.requests if r.path == "/v1/models"]
    assert asked and asked[-1].headers["authorization"] == "Bearer sk-client"


@pytest.mark.slow
def test_any_other_path_is_forwarded_unchanged_and_answered_as_the_upstream_answers(served):
    server, upstream = served
    body = b'{"input": ["a", "b"], "model": "fake-model"}'
    response = httpx.post(
        f"{server.url}/v1/embeddings",
        content=body,
        headers={
            "content-type": "application/json",
            "authorization": "Bearer sk-client",
            "x-custom": "kept",
            "connection": "keep-alive, x-per-hop",
            "x-per-hop": "dropped",
        },
    )
    # Not the dashboard's 405: the upstream's own answer, status and body.
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Unknown route POST /v1/embeddings"
    [sent] = [r for r in upstream.requests if r.path == "/v1/embeddings"]
    assert sent.body == {"input": ["a", "b"], "model": "fake-model"}
    assert sent.headers["x-custom"] == "kept"
    assert sent.headers["authorization"] == "Bearer sk-client"
    assert "x-per-hop" not in sent.headers
    assert httpx.get(f"{server.url}/v1/models/other").status_code == 404  # GET too
    assert upstream.requests[-1].path == "/v1/models/other"
