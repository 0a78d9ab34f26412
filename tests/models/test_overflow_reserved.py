"""An overflow that states the reply it reserved: the retry must fit the limit less that reply."""

from __future__ import annotations

import pytest

from contextkeep._compacting import recovery_target
from contextkeep._errors import OverflowPhase
from contextkeep.models.overflow import classify_error

LEGACY = (
    "This model's maximum context length is 16384 tokens. However, you requested 18166 tokens "
    "(16118 in the messages, 2048 in the completion). Please reduce the length of the messages or completion."
)
VLLM = (
    "This model's maximum context length is 16384 tokens. However, you requested 2048 output tokens and "
    "your prompt contains at least 16118 input tokens, for a total of at least 18166 tokens."
)
ANTHROPIC = "input length and `max_tokens` exceed context limit: 16118 + 2048 > 16384, decrease input length"


@pytest.mark.parametrize("message", [LEGACY, VLLM, ANTHROPIC])
def test_the_limit_and_the_requested_output_are_read(message):
    error = classify_error(400, {"error": {"message": message}})
    assert error is not None
    assert (error.phase, error.limit, error.requested_output) == (OverflowPhase.TOTAL_CONTEXT, 16384, 2048)
    assert error.requested == 18166


@pytest.mark.parametrize("local", [16118, 15000, 17500])  # our count may differ from the provider's
def test_the_gap_counts_the_requested_output_and_the_margin(local):
    error = classify_error(400, {"error": {"message": LEGACY}})
    assert error is not None
    target = recovery_target(local, error, margin=256)
    # In the provider's tokens: (16118 + 2048 + 256) - 16384 = 2038 must go, i.e. 14080 may stay.
    assert target == int(local * (16384 - 2048) / 16118) - 256
    assert target * 16118 / local + 2048 < 16384  # the retry fits, with the reply it reserves


def test_an_input_overflow_fits_the_reply_the_request_reserves():
    error = classify_error(
        400,
        {
            "error": {
                "message": "This model's maximum context length is 16384 tokens. However, your messages "
                "resulted in 17000 tokens. Please reduce the length of the messages."
            }
        },
    )
    assert error is not None and error.phase is OverflowPhase.INPUT_CONTEXT and error.requested_output is None
    # The request's max_tokens (the budget's reserved output) must fit beside the retried prompt.
    assert recovery_target(17000, error, margin=0, reserved=4096) == 16384 - 4096
    assert recovery_target(17000, error, margin=0) == 16384
