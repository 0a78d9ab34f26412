"""Configuration: seed defaults, validation naming the key, TOML and environment loading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contextkeep._compaction import resolve_layers
from contextkeep._config import ContextConfig, FailureStrategy, UsageMode, load_config
from contextkeep._errors import ConfigError


def test_seed_defaults() -> None:
    c = ContextConfig()
    # DB-GPT agent_context
    assert (c.warning_threshold, c.error_threshold, c.critical_threshold) == (0.70, 0.90, 0.95)
    assert (c.min_keep_recent_rounds, c.max_observation_age_rounds, c.truncated_observation_max_chars) == (
        3,
        5,
        200,
    )
    assert (c.min_keep_tokens, c.max_compact_failures) == (10_000, 3)
    # AgentScope ContextConfig and Agents-Flex policy
    assert c.tool_result_limit == 3000
    assert c.compression_threshold_ratio == 0.85 and c.max_token_limit_recovery_attempts == 1
    assert c.compress_on_token_limit_exceeded and c.usage_mode is UsageMode.COMBINED


def test_every_field_is_documented() -> None:
    missing = [name for name, f in ContextConfig.model_fields.items() if not f.description]
    assert missing == []


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"warning_threshold": 0.95}, "error_threshold"),
        ({"tool_result_limit": 0}, "tool_result_limit"),
        ({"compression_threshold_ratio": 1.5}, "compression_threshold_ratio"),
        ({"compression_threshold_ratio": 0}, "compression_threshold_ratio"),
        ({"trigger_ratio": 0.95}, "trigger_ratio"),
        ({"layers": ["L1,L2"]}, "layers.0"),
        ({"target_ratio": 0.8}, "target_ratio"),
        ({"no_such_key": 1}, "no_such_key"),
    ],
)
def test_invalid_values_name_the_key(values: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        ContextConfig(**values)
    assert info.value.key == key


@pytest.mark.parametrize("names", [("L7",), ("L1", "L4")])
def test_a_layer_name_is_checked_against_the_registry_when_the_engine_is_built(
    names: tuple[str, ...],
) -> None:
    config = ContextConfig(layers=names)  # a layer may be registered after the config is made
    with pytest.raises(ConfigError) as info:
        resolve_layers(config.layers)
    assert info.value.key == f"layers.{len(names) - 1}"
    assert repr(names[-1]) in str(info.value) or "L4" in str(info.value)


def test_threshold_of_exactly_one_is_valid() -> None:
    assert ContextConfig(compression_threshold_ratio=1.0).compression_threshold_ratio == 1.0


def test_dbgpt_toml_with_per_model_context_length(tmp_path: Path) -> None:
    path = tmp_path / "contextkeep.toml"
    path.write_text(
        """
[service.web.agent_context]
reserved_tokens = 4096
warning_threshold = 0.70
error_threshold = 0.90
critical_threshold = 0.95
min_keep_recent_rounds = 3
max_observation_age_rounds = 5
truncated_observation_max_chars = 200
min_keep_tokens = 10000
max_compact_failures = 3

[[models.llms]]
name = "Qwen/Qwen2.5-Coder-32B-Instruct"
provider = "proxy/siliconflow"
api_key = "${env:SILICONFLOW_API_KEY}"
context_length = 32768
"""
    )
    c = load_config(path, model="Qwen/Qwen2.5-Coder-32B-Instruct", environ={})
    # The model's own figure, not a configured cap: it binds the window as the model's (explicit) window.
    assert (c.model_context_length, c.max_context_tokens, c.reserved_tokens) == (32768, None, 4096)
    assert c.capacity(None).window == 32768
    assert load_config(path, model="other", environ={}).model_context_length is None


def test_context_table_and_environment_overrides(tmp_path: Path) -> None:
    path = tmp_path / "contextkeep.toml"
    path.write_text('[context]\ntool_result_limit = 500\nlayers = ["L1", "L2"]\n')
    env = {
        "CONTEXTKEEP_TOOL_RESULT_LIMIT": "800",
        "CONTEXTKEEP_PIN_FIRST_USER": "false",
        "CONTEXTKEEP_LAYERS": "L2,L3",
        "CONTEXTKEEP_COMPRESSION_FAILURE_STRATEGY": "fail",
    }
    c = load_config(path, environ=env)
    assert c.tool_result_limit == 800 and c.pin_first_user is False
    assert c.layers == ("L2", "L3") and c.compression_failure_strategy is FailureStrategy.FAIL
    with pytest.raises(ConfigError, match="tool_result_limit"):
        load_config(path, environ={"CONTEXTKEEP_TOOL_RESULT_LIMIT": "lots"})


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "contextkeep.toml"
    bad.write_text("[context\n")
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_config(bad, environ={})


def test_merged_revalidates() -> None:
    assert ContextConfig().merged(target_ratio=0.4).target_ratio == 0.4
    with pytest.raises(ConfigError):
        ContextConfig().merged(warning_threshold=2)
