"""The real OpenAI and Anthropic SDKs → overflow errors.

The SDKs are fed through a mock transport so they build their own errors.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextkeep.models.overflow import classify_exception
from support.overflow_bodies import IN, OUT, TOTAL, anthropic_body, openai_body


def _http_lib() -> Any:
    """The HTTP library the installed SDKs are built on (httpx2 in recent versions)."""
    try:
        import httpx2

        return httpx2
    except ImportError:
        import httpx

        return httpx


def _answering(status: int, body: object) -> Any:
    http = _http_lib()
    return http.Client(transport=http.MockTransport(lambda request: http.Response(status, json=body)))


def test_real_openai_bad_request_error():
    openai = pytest.importorskip("openai")
    body = json.loads(
        openai_body(
            "This model's maximum context length is 8192 tokens. However, your messages resulted in "
            "10000 tokens. Please reduce the length of the messages.",
            "context_length_exceeded",
        )
    )
    client = openai.OpenAI(
        api_key="k", base_url="http://test/v1", http_client=_answering(400, body), max_retries=0
    )

    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    err = classify_exception(caught.value)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider, err.status_code) == (
        IN,
        8192,
        10000,
        "openai",
        400,
    )
    assert err.__cause__ is caught.value


def test_real_openai_rate_limit_error():
    openai = pytest.importorskip("openai")
    body = json.loads(
        openai_body(
            "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, "
            "Requested 45000.",
            "rate_limit_exceeded",
            "tokens",
        )
    )
    client = openai.OpenAI(
        api_key="k", base_url="http://test/v1", http_client=_answering(429, body), max_retries=0
    )

    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    assert classify_exception(caught.value) is None


def test_real_openai_error_built_by_hand():
    openai = pytest.importorskip("openai")
    http = _http_lib()
    response = http.Response(
        400,
        json={"error": {"message": "Your input exceeds the context window of this model."}},
        request=http.Request("POST", "http://test/v1/responses"),
    )
    exc = openai.BadRequestError(
        "Error code: 400",
        response=response,
        body={
            "message": "Your input exceeds the context window of this model.",
            "code": "context_length_exceeded",
        },
    )

    err = classify_exception(exc)

    assert err is not None
    assert (err.phase, err.provider, err.status_code) == (IN, "openai", 400)


@pytest.mark.parametrize(
    ("message", "phase", "limit", "requested"),
    [
        pytest.param("prompt is too long: 210000 tokens > 200000 maximum", IN, 200000, 210000, id="input"),
        pytest.param(
            "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000, decrease input "
            "length or `max_tokens` and try again",
            TOTAL,
            200000,
            210000,
            id="total",
        ),
        pytest.param(
            "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-x",
            OUT,
            64000,
            100000,
            id="output",
        ),
    ],
)
def test_real_anthropic_bad_request_error(message, phase, limit, requested):
    anthropic = pytest.importorskip("anthropic")
    body = json.loads(anthropic_body(message))
    client = anthropic.Anthropic(
        api_key="k", base_url="http://test", http_client=_answering(400, body), max_retries=0
    )

    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    err = classify_exception(caught.value)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider, err.status_code) == (
        phase,
        limit,
        requested,
        "anthropic",
        400,
    )


# --- Ollama's silent truncation ---
