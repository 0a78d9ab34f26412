"""Budget arithmetic, thresholds, the output-reservation chain and capacity resolution."""

from __future__ import annotations

from typing import Any

import pytest

from contextkeep._budget import Budget, ContextState, ReservedOutput, Thresholds, resolve_reserved_output
from contextkeep._capabilities import CapacitySource, ModelSpec, resolve_model_spec
from contextkeep._errors import ConfigError


def test_seed_example_figures() -> None:
    budget = Budget(128_000, 8_192)
    assert budget.effective == 119_808
    assert budget.ratio(100_000) == pytest.approx(0.8347, abs=1e-4)
    assert budget.remaining(100_000) == 19_808
    assert budget.state(100_000) is ContextState.WARNING


@pytest.mark.parametrize(
    ("used", "state"),
    [
        (0, ContextState.NORMAL),
        (69, ContextState.NORMAL),
        (70, ContextState.WARNING),
        (90, ContextState.ERROR),
        (95, ContextState.CRITICAL),
        (100, ContextState.OVERFLOW),
        (150, ContextState.OVERFLOW),
    ],
)
def test_states_begin_at_their_thresholds(used: int, state: ContextState) -> None:
    assert Budget(110, 10).state(used) is state


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"warning": 0}, "warning_threshold"),
        ({"warning": 1.2}, "warning_threshold"),
        ({"error": 0.6}, "error_threshold"),
        ({"critical": 0.9}, "critical_threshold"),
        ({"overflow": 0.5}, "overflow_threshold"),
        ({"warning": "high"}, "warning_threshold"),
    ],
)
def test_thresholds_are_validated_with_the_key_named(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        Thresholds(**kwargs)
    assert info.value.key == key
    assert key in str(info.value)


def test_custom_thresholds_up_to_one() -> None:
    t = Thresholds(warning=0.5, error=0.6, critical=0.7, overflow=1.0)
    assert t.state(0.65) is ContextState.ERROR


def test_unknown_capacity_gives_no_ratio_or_state() -> None:
    budget = Budget(None, 4096)
    assert budget.effective is None
    assert budget.ratio(10) is None and budget.state(10) is None and budget.remaining(10) is None
    # A reservation that fills a known window is not "unknown" (#19 point 5): see test_bad_input.
    for reserved in (4096, 8192):
        with pytest.raises(ConfigError, match="reserved_output"):
            Budget(4096, reserved)


def test_reserved_output_priority_chain() -> None:
    assert resolve_reserved_output(1000, 2000, 3000, 4000) == (1000, ReservedOutput.EXPLICIT)
    assert resolve_reserved_output(0, 2000, 3000, 4000) == (2000, ReservedOutput.REQUEST)
    assert resolve_reserved_output(None, None, 3000, 4000) == (3000, ReservedOutput.AGENT)
    assert resolve_reserved_output(0, 0, 0, 4000) == (4000, ReservedOutput.MODEL)
    assert resolve_reserved_output() == (0, ReservedOutput.NONE)
    with pytest.raises(ConfigError, match="request_max_tokens"):
        resolve_reserved_output(None, -5)


def test_budget_and_spec_reject_nonsense() -> None:
    with pytest.raises(ConfigError, match="context_window"):
        Budget(0)
    with pytest.raises(ConfigError, match="reserved_output"):
        Budget(100, -1)
    with pytest.raises(ConfigError, match="context_window"):
        ModelSpec("m", context_window=-3)
    with pytest.raises(ConfigError, match="model"):
        ModelSpec("")


def test_capacity_resolution_chain_reports_its_source() -> None:
    assert resolve_model_spec("deepseek-chat", context_window=131_072).source is CapacitySource.EXPLICIT
    registry = resolve_model_spec("deepseek-chat")
    assert registry.source is CapacitySource.REGISTRY and registry.context_window == 64_000
    unknown = resolve_model_spec("my-private-model-7b")
    assert unknown.source is CapacitySource.UNKNOWN and unknown.context_window is None
    assert resolve_model_spec("deepseek-chat", registry=False).source is CapacitySource.UNKNOWN


def test_capacity_from_the_serving_endpoint() -> None:
    from contextkeep._capabilities import aresolve_model_spec
    from contextkeep.testing import FakeLLMServer

    with FakeLLMServer(model="served-model", context_window=12_345) as srv:
        spec = resolve_model_spec(
            "served-model", base_url=srv.base_url
        )  # vLLM-style /v1/models max_model_len
        assert (spec.context_window, spec.source) == (12_345, CapacitySource.ENDPOINT)
        other = resolve_model_spec("not-served", base_url=srv.base_url, registry=False)
        assert other.source is CapacitySource.UNKNOWN
        import asyncio

        assert (
            asyncio.run(aresolve_model_spec("served-model", base_url=srv.base_url)).context_window == 12_345
        )


def test_capacity_from_ollama_show() -> None:
    from contextkeep._capabilities import _window_from_ollama

    assert (
        _window_from_ollama({"model_info": {"qwen2.context_length": 32_768, "general.architecture": "qwen2"}})
        == 32_768
    )
    assert _window_from_ollama({"model_info": {}}) is None
