"""The fake LLM server's context window: overflow errors in each provider's format."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from contextkeep.testing import FakeLLMServer, default_counter
from support import fake_server
from support.fake_server import USER, WINDOW, claude, fixed, oai

# The shared fixture; bound to a name here so pytest finds it in this module.
srv = fake_server.srv


MSG = "This model's maximum context length is 100 tokens. However, "
REQUESTED = (
    "you requested 150 tokens (150 in the messages, 0 in the completion). "
    "Please reduce the length of the messages or completion."
)
INPUT_OVERFLOW: dict[str, dict[str, Any]] = {
    "openai": {
        "error": {
            "message": MSG + "your messages resulted in 150 tokens. "
            "Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    },
    "deepseek": {
        "error": {
            "message": MSG + REQUESTED,
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_request_error",
        }
    },
    "vllm": {
        "object": "error",
        "message": MSG + REQUESTED,
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "anthropic": {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 150 tokens > 100 maximum"},
    },
    "llamacpp": {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 150,
            "n_ctx": 100,
        }
    },
    "dashscope": {
        "code": "InvalidParameter",
        "message": "Range of input length should be [1, 100]",
        "request_id": "fake-request-0001",
    },
}


@pytest.mark.parametrize("fmt", sorted(INPUT_OVERFLOW))
def test_prompt_over_window_answers_in_provider_format(fmt: Any) -> None:
    server = FakeLLMServer(context_window=WINDOW, counter=fixed(150), overflow_format=fmt)
    with server, pytest.raises(openai.BadRequestError) as caught:
        oai(server).chat.completions.create(model="m", messages=USER)
    error = caught.value
    expected = INPUT_OVERFLOW[fmt]
    assert error.status_code == 400
    assert error.response.json() == expected
    # The SDK unwraps a top-level "error" object into `body`.
    assert error.body == expected.get("error", expected)


TOTAL_OVERFLOW = {
    "openai": MSG + "you requested 110 tokens (60 in the messages, 50 in the completion). "
    "Please reduce the length of the messages or completion.",
    "deepseek": MSG + "you requested 110 tokens (60 in the messages, 50 in the completion). "
    "Please reduce the length of the messages or completion.",
    "vllm": MSG + "you requested 110 tokens (60 in the messages, 50 in the completion). "
    "Please reduce the length of the messages or completion.",
    "anthropic": "input length and `max_tokens` exceed context limit: 60 + 50 > 100, "
    "decrease input length or `max_tokens` and try again",
    "dashscope": "Range of input length should be [1, 50]",
}


@pytest.mark.parametrize("fmt", sorted(TOTAL_OVERFLOW))
def test_prompt_plus_max_tokens_over_window_is_total_overflow(fmt: Any) -> None:
    with FakeLLMServer(context_window=WINDOW, counter=fixed(60), overflow_format=fmt) as server:
        client = oai(server)
        assert client.chat.completions.create(model="m", messages=USER, max_tokens=40)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=USER, max_tokens=50)
    body = caught.value.response.json()
    message = body.get("message") or body["error"]["message"]
    assert caught.value.status_code == 400
    assert message == TOTAL_OVERFLOW[fmt]


def test_max_completion_tokens_also_counts(srv: FakeLLMServer) -> None:
    srv.counter = fixed(60)
    with pytest.raises(openai.BadRequestError, match="60 in the messages, 41 in the completion"):
        oai(srv).chat.completions.create(model="m", messages=USER, max_completion_tokens=41)


@pytest.mark.parametrize(("fmt", "enforce"), [("openai", False), ("llamacpp", None)])
def test_max_tokens_not_enforced_when_disabled_or_provider_does_not(fmt: Any, enforce: Any) -> None:
    server = FakeLLMServer(
        context_window=WINDOW, counter=fixed(60), overflow_format=fmt, enforce_max_tokens=enforce
    )
    with server:
        reply = oai(server).chat.completions.create(model="m", messages=USER, max_tokens=90)
    assert reply.choices[0].message.content == "ok"


def test_anthropic_endpoint_always_uses_anthropic_format() -> None:
    server = FakeLLMServer(context_window=WINDOW, counter=fixed(150), overflow_format="vllm")
    with server, pytest.raises(anthropic.BadRequestError) as caught:
        claude(server).messages.create(model="c", max_tokens=10, messages=USER)
    assert caught.value.status_code == 400
    assert caught.value.response.json() == INPUT_OVERFLOW["anthropic"]


def test_ollama_truncates_silently() -> None:
    server = FakeLLMServer(context_window=WINDOW, counter=fixed(150), overflow_format="ollama")
    with server:
        reply = oai(server).chat.completions.create(model="m", messages=USER, max_tokens=500)
    assert reply.choices[0].message.content == "ok"
    assert reply.usage is not None and reply.usage.prompt_tokens == WINDOW


def test_real_count_rejects_a_long_conversation(srv: FakeLLMServer) -> None:
    client = oai(srv)
    fits: Any = [{"role": "user", "content": "word " * 50}]
    assert client.chat.completions.create(model="m", messages=fits)
    too_long: Any = [{"role": "user", "content": "word " * 120}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=too_long)
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "context_length_exceeded"
    assert f"resulted in {default_counter({'messages': too_long})} tokens" in caught.value.message
