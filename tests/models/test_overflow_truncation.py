"""Ollama's silent truncation, detected from its prompt count (`check_silent_truncation`)."""

from __future__ import annotations

import pytest

from contextkeep.models.overflow import check_silent_truncation
from support.overflow_bodies import IN


@pytest.mark.parametrize(
    ("prompt_eval_count", "local", "num_ctx", "tolerance"),
    [
        pytest.param(4096, 6000, 4096, 0.05, id="cut_to_the_window"),
        pytest.param(4000, 6000, 4096, 0.05, id="cut_just_under_the_window"),
        pytest.param(2048, 2200, 2048, 0.0, id="no_tolerance"),
    ],
)
def test_silent_truncation_is_detected(prompt_eval_count, local, num_ctx, tolerance):
    err = check_silent_truncation(prompt_eval_count, local, num_ctx, tolerance=tolerance)

    assert err is not None
    assert (err.phase, err.limit, err.requested, err.provider) == (IN, num_ctx, local, "ollama")
    assert err.gap == local - num_ctx


@pytest.mark.parametrize(
    ("prompt_eval_count", "local", "num_ctx"),
    [
        pytest.param(3000, 3000, 4096, id="fits"),
        pytest.param(4090, 4200, 4096, id="local_count_within_tokenizer_drift"),
        pytest.param(500, 6000, 4096, id="cached_prefix_not_evaluated"),
        pytest.param(None, 6000, 4096, id="no_eval_count"),
        pytest.param(4096, 6000, None, id="no_num_ctx"),
        pytest.param(4096, 6000, 0, id="zero_num_ctx"),
    ],
)
def test_silent_truncation_not_reported(prompt_eval_count, local, num_ctx):
    assert check_silent_truncation(prompt_eval_count, local, num_ctx) is None


@pytest.mark.parametrize("tolerance", [-0.1, 1.0])
def test_silent_truncation_rejects_bad_tolerance(tolerance):
    with pytest.raises(ValueError, match="tolerance"):
        check_silent_truncation(4096, 6000, 4096, tolerance=tolerance)
