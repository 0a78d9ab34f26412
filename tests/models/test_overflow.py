"""Provider errors as they arrive → overflow phase, limit, requested and provider."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextkeep.models.overflow import classify_error
from support.overflow_bodies import IN, anthropic_body, openai_body
from support.overflow_cases_openai import OPENAI_OVERFLOWS
from support.overflow_cases_others import OTHER_OVERFLOWS

OVERFLOWS = OPENAI_OVERFLOWS + OTHER_OVERFLOWS


@pytest.mark.parametrize(
    ("status", "body", "phase", "limit", "requested", "provider"),
    [pytest.param(*case[1:], id=case[0]) for case in OVERFLOWS],
)
def test_overflow_is_classified(status, body, phase, limit, requested, provider):
    err = classify_error(status, body)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider) == (phase, limit, requested, provider)
    assert err.status_code == status
    assert str(err)


NOT_OVERFLOWS: list[tuple[str, int | None, Any]] = [
    (
        "openai_tpm_rate_limit",
        429,
        openai_body(
            "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, "
            "Used 29000, Requested 5000. Please try again in 2s.",
            "rate_limit_exceeded",
            "tokens",
        ),
    ),
    (
        "openai_request_too_large_tpm_without_status",
        None,
        openai_body(
            "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, "
            "Requested 45000. The input or output tokens must be reduced in order to run successfully.",
            "rate_limit_exceeded",
            "tokens",
        ),
    ),
    (
        "groq_tpm_on_413",
        413,
        openai_body(
            "Request too large for model `llama3-70b-8192` in organization `org_x` service tier "
            "`on_demand` on tokens per minute (TPM): Limit 6000, Requested 9000, please reduce your "
            "message size and try again.",
            "rate_limit_exceeded",
            "tokens",
        ),
    ),
    (
        "status_429_vetoes_length_wording",
        429,
        "This model's maximum context length is 8192 tokens. However, your messages resulted in "
        "10000 tokens.",
    ),
    (
        "anthropic_rate_limit",
        429,
        anthropic_body(
            "This request would exceed the rate limit for your organization of 40,000 input tokens "
            "per minute.",
            "rate_limit_error",
        ),
    ),
    (
        "anthropic_413_bytes",
        413,
        anthropic_body("Request exceeds the maximum allowed number of bytes.", "request_too_large"),
    ),
    (
        "anthropic_image_too_large",
        400,
        anthropic_body(
            "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum: 6291456 bytes > "
            "5242880 bytes"
        ),
    ),
    ("anthropic_overloaded", 529, anthropic_body("Overloaded", "overloaded_error")),
    ("nginx_413", 413, "<html><head><title>413 Request Entity Too Large</title></head></html>"),
    (
        "openai_invalid_tool_schema",
        400,
        openai_body(
            "Invalid schema for function 'read': In context=('properties', 'path'), schema must have "
            "a 'type' key.",
            "invalid_function_parameters",
        ),
    ),
    (
        "openai_tool_message_without_call",
        400,
        openai_body(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
            "with 'tool_calls'."
        ),
    ),
    (
        "openai_string_above_max_length",
        400,
        openai_body(
            "Invalid 'messages[3].content': string too long. Expected a string with maximum length "
            "1048576, but got a string with length 2097152 instead.",
            "string_above_max_length",
        ),
    ),
    (
        "openai_wrong_key",
        401,
        openai_body("Incorrect API key provided: sk-abc***def.", "invalid_api_key"),
    ),
    (
        "openai_unknown_model",
        404,
        openai_body("The model `gpt-9` does not exist or you do not have access to it.", "model_not_found"),
    ),
    (
        "server_error_naming_the_window",
        500,
        openai_body(
            "failed to load the model: the maximum context length is not available", None, "server_error"
        ),
    ),
    (
        "pydantic_422_echoing_the_prompt",
        422,
        {
            "detail": [
                {
                    "type": "string_too_long",
                    "loc": ["body", "messages", 0, "content"],
                    "msg": "String should have at most 100 characters",
                    "input": "Why does my agent fail with: This model's maximum context length is 8192 "
                    "tokens. However, your messages resulted in 10000 tokens.",
                }
            ]
        },
    ),
    ("empty_400", 400, ""),
    ("no_body", 400, None),
]


@pytest.mark.parametrize(("status", "body"), [pytest.param(*case[1:], id=case[0]) for case in NOT_OVERFLOWS])
def test_other_errors_are_not_overflows(status, body):
    assert classify_error(status, body) is None


ANTHROPIC_DICT = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum",
    },
}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(ANTHROPIC_DICT, id="dict"),
        pytest.param(json.dumps(ANTHROPIC_DICT), id="json_text"),
        pytest.param(json.dumps(json.dumps(ANTHROPIC_DICT)), id="json_encoded_twice"),
        pytest.param("  " + json.dumps(ANTHROPIC_DICT, indent=2) + "\n", id="pretty_json_text"),
        pytest.param("prompt is too long: 210000 tokens > 200000 maximum", id="plain_text"),
    ],
)
def test_body_shapes_give_the_same_answer(body):
    err = classify_error(400, body)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider) == (IN, 200000, 210000, "anthropic")
    assert str(err) == "prompt is too long: 210000 tokens > 200000 maximum"
    assert (err.gap, err.recoverable) == (10000, True)


def test_message_is_the_line_that_matched():
    body = (
        'Traceback (most recent call last):\n  File "llm_engine.py", line 1, in _validate\n'
        "ValueError: The prompt (length 9000) is longer than the maximum model length of 8192.\n"
    )

    err = classify_error(500, body)

    assert err is not None
    assert str(err) == "ValueError: The prompt (length 9000) is longer than the maximum model length of 8192."


def test_given_provider_overrides_the_detected_one():
    body = openai_body(
        "This model's maximum context length is 65536 tokens. However, you requested 70000 tokens "
        "(70000 in the messages, 0 in the completion)."
    )

    err = classify_error(400, body, provider="deepseek")

    assert err is not None
    assert err.provider == "deepseek"


def test_output_overflow_is_not_recoverable():
    err = classify_error(
        400,
        anthropic_body("max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens"),
    )

    assert err is not None
    assert (err.recoverable, err.gap) == (False, 36000)
