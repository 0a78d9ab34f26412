"""SDK exceptions → overflow errors (`classify_exception`).

The fakes mimic the SDK attributes we read (the boundary we do not own).
"""

from __future__ import annotations

import pytest

from contextkeep._errors import ContextOverflowError
from contextkeep.models.overflow import classify_exception
from support.overflow_bodies import IN, UNKNOWN


class FakeResponse:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class FakeAPIStatusError(Exception):
    def __init__(self, message: str, *, status_code: int, body: object | None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.body = body
        self.response = FakeResponse(status_code)


class FakeResponseOnlyError(Exception):
    """An exception that carries its status only on `.response`."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.response = FakeResponse(status_code)


class ContextWindowExceededError(Exception):
    """Same name as litellm's class; litellm prefixes its own text to the provider's."""

    def __init__(self, message: str, llm_provider: str) -> None:
        super().__init__(message)
        self.message = message
        self.llm_provider = llm_provider
        self.status_code = 400


class ProxyContextWindowError(ContextWindowExceededError):
    pass


def test_exception_with_parsed_body():
    exc = FakeAPIStatusError(
        "Error code: 400",
        status_code=400,
        body={
            "message": "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 10000 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        },
    )

    err = classify_exception(exc)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider, err.status_code) == (
        IN,
        8192,
        10000,
        "openai",
        400,
    )
    assert err.__cause__ is exc


def test_exception_with_status_only_on_response():
    exc = FakeResponseOnlyError("prompt is too long: 210000 tokens > 200000 maximum", 400)

    err = classify_exception(exc)

    assert err is not None
    assert (err.phase, err.status_code, err.provider) == (IN, 400, "anthropic")


def test_litellm_exception_uses_its_provider_and_the_inner_wording():
    exc = ContextWindowExceededError(
        "AnthropicError - prompt is too long: 210000 tokens > 200000 maximum", llm_provider="vertex_ai"
    )

    err = classify_exception(exc)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider) == (IN, 200000, 210000, "vertex_ai")
    assert err.__cause__ is exc


@pytest.mark.parametrize("cls", [ContextWindowExceededError, ProxyContextWindowError])
def test_litellm_verdict_is_kept_when_the_wording_is_unknown(cls):
    exc = cls("Hosted_vllmException - Input length 9000 exceeds model limit", llm_provider="hosted_vllm")

    err = classify_exception(exc)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider) == (UNKNOWN, None, None, "hosted_vllm")
    assert err.__cause__ is exc


def test_overflow_error_is_returned_as_is():
    original = ContextOverflowError("too long", phase=IN, limit=10, requested=20)

    assert classify_exception(original) is original


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(ValueError("boom"), id="unrelated"),
        pytest.param(
            FakeAPIStatusError(
                "Error code: 429",
                status_code=429,
                body={"message": "Rate limit reached ... tokens per min (TPM): Limit 30000, Requested 45000"},
            ),
            id="rate_limit",
        ),
        pytest.param(
            FakeAPIStatusError("Error code: 401", status_code=401, body={"message": "invalid x-api-key"}),
            id="auth",
        ),
    ],
)
def test_exceptions_that_are_not_overflows(exc):
    assert classify_exception(exc) is None
