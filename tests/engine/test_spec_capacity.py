"""A budget never exceeds what the model holds; an adapter without a spec is keyed by its class name."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import contextkeep as ck
from contextkeep._baseline import USAGE_DOCUMENT, UsageStatus
from contextkeep._capabilities import CapacitySource, ModelSpec
from contextkeep._config import ContextConfig, load_config
from contextkeep._events import ContextStatus, ModelCompleted
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._summarizers import LLMSummarizer, SummaryRequest
from contextkeep._tokens import counter_for_model
from contextkeep._usage import Usage
from contextkeep.models.adapter import ModelReply
from contextkeep.stores import MemoryStore
from support import collect, rounds

QWEN = "Qwen/Qwen2.5-Coder-32B-Instruct"

# The DB-GPT seed's configuration section, as published.
SEED_TOML = """
[service.web.agent_context]
max_context_tokens = 120000
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


def manager(tmp_path: Path, model: ModelSpec | str, config: ContextConfig) -> ContextManager:
    return ContextManager(model, config=config, workspace=tmp_path / "ws", tokenizer="heuristic")


async def first_status(cm: ContextManager) -> ContextStatus:
    async with cm.session("c1") as s:
        await s.add([{"role": "system", "content": "You help."}, {"role": "user", "content": "hello"}])
        return (await s.prepare()).status


async def test_seed_toml_gives_the_qwen_model_its_own_32k_window(tmp_path: Path) -> None:
    path = tmp_path / "contextkeep.toml"
    path.write_text(SEED_TOML, encoding="utf-8")
    cm = manager(tmp_path, QWEN, load_config(path, model=QWEN, environ={}))
    async with cm.session("c1") as s:
        budget = s.budget()
    assert (budget.context_window, budget.effective) == (32_768, 32_768 - 4_096)
    status = await first_status(cm)
    assert (status.context_window, status.budget) == (32_768, 28_672)
    assert status.capacity_source == "explicit"  # the model's declared figure bound it, not the config


@pytest.mark.parametrize(
    "source", [CapacitySource.EXPLICIT, CapacitySource.ENDPOINT, CapacitySource.REGISTRY]
)
async def test_configured_window_above_the_models_is_lowered_to_the_model(
    tmp_path: Path, source: CapacitySource
) -> None:
    model = ModelSpec(QWEN, context_window=32_768, source=source)
    cm = manager(tmp_path, model, ContextConfig(max_context_tokens=120_000, reserved_tokens=4_096))
    status = await first_status(cm)
    assert (status.context_window, status.budget, status.capacity_source) == (32_768, 28_672, source.value)


async def test_configured_window_below_the_models_binds_and_is_named_config(tmp_path: Path) -> None:
    model = ModelSpec(QWEN, context_window=32_768)
    cm = manager(tmp_path, model, ContextConfig(max_context_tokens=16_000, reserved_tokens=1_000))
    status = await first_status(cm)
    assert (status.context_window, status.budget, status.capacity_source) == (16_000, 15_000, "config")


async def test_a_config_asking_for_more_than_the_model_holds_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cm = manager(tmp_path, ModelSpec(QWEN, 32_768), ContextConfig(max_context_tokens=120_000))
    with caplog.at_level(logging.WARNING, logger="contextkeep"):
        for conversation in ("c1", "c2"):
            async with cm.session(conversation) as s:
                await s.add({"role": "user", "content": "hello"})
                for _ in range(3):
                    await s.prepare()
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    assert "120000" in warned[0].getMessage() and QWEN in warned[0].getMessage()


async def test_every_status_of_a_compaction_names_the_bound(tmp_path: Path) -> None:
    cm = manager(tmp_path, ModelSpec("test-model", 100_000), ContextConfig(max_context_tokens=4_000))
    seen = collect(cm.events, ContextStatus)
    async with cm.session("c1") as s:
        await s.add([{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}, *rounds(30)])
        view = await s.prepare()
    assert view.compacted  # the layers ran, each with its own status
    assert {s.compact_layer for s in seen} > {None}
    assert {(s.context_window, s.capacity_source) for s in seen} == {(4_000, "config")}


async def test_confirmed_only_status_names_the_bound(tmp_path: Path) -> None:
    config = ContextConfig(max_context_tokens=120_000, usage_mode="confirmed_only")
    status = await first_status(manager(tmp_path, ModelSpec(QWEN, 32_768), config))
    assert (status.context_window, status.capacity_source) == (32_768, "explicit")


class PlainModel:
    """A user's model with nothing but `complete`: no spec, no model key."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        self.calls += 1
        text = json.dumps(
            {
                "task_overview": "greet",
                "current_state": "greeted",
                "important_discoveries": [],
                "next_steps": [],
                "context_to_preserve": [],
            }
        )
        return ModelReply(Message("assistant", text), Usage(input_tokens=40, output_tokens=5))


async def test_runner_keys_a_spec_less_adapter_by_its_class_name(tmp_path: Path) -> None:
    store = MemoryStore()
    runner = ck.Runner(store=store, workspace=str(tmp_path / "ws"))
    seen = collect(runner.events, ModelCompleted)
    model = PlainModel()
    turn = await runner.run(ck.Agent("greeter", model), "c1", "hello")
    assert model.calls == 1 and "greet" in turn.output
    [scope] = await store.list_scopes("c1", USAGE_DOCUMENT)
    assert scope.endswith("|PlainModel")
    assert [e.model_key for e in seen] == ["PlainModel"]
    async with runner.manager(ck.Agent("greeter", model)).session(
        "c1", agent_id="greeter", agent_version="1"
    ) as s:
        assert s.usage.status is UsageStatus.CONFIRMED_BASELINE and s.usage.baseline == 45


async def test_llm_summarizer_runs_on_a_spec_less_adapter() -> None:
    model = PlainModel()
    request = SummaryRequest(
        "c1",
        [Message("user", "say hello"), Message("assistant", "hello")],
        None,
        ContextConfig(),
        counter_for_model("test-model", "heuristic"),
    )
    result = await LLMSummarizer(model).summarize(request)
    assert model.calls == 1 and result.method == "llm" and "greet" in result.text
