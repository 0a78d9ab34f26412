"""A model spec is an adapter's optional capability: `SpecifiedAdapter`, read by `adapter_spec`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anthropic
import openai

from contextkeep._capabilities import ModelSpec
from contextkeep._messages import Message
from contextkeep.models import (
    AnthropicAdapter,
    ModelAdapter,
    ModelReply,
    OpenAIAdapter,
    SpecifiedAdapter,
    adapter_spec,
)

UNREACHABLE = "http://127.0.0.1:9"  # never called: the adapters are only built


class PlainModel:
    """A user's model with nothing but `complete`."""

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        return ModelReply(Message("assistant", "ok"))


class KnownModel(PlainModel):
    """A user's model that names itself and its window."""

    spec = ModelSpec("team/model-v2", context_window=32_768)


class NoneSpecModel(PlainModel):
    """A user's model whose `spec` is not a spec."""

    spec = None


def test_a_spec_less_adapter_is_keyed_by_its_class_name() -> None:
    model = PlainModel()
    assert isinstance(model, ModelAdapter) and not isinstance(model, SpecifiedAdapter)
    assert adapter_spec(model) == ModelSpec("PlainModel")
    assert adapter_spec(NoneSpecModel()) == ModelSpec("NoneSpecModel")


def test_a_specified_adapter_gives_its_own_spec() -> None:
    model = KnownModel()
    assert isinstance(model, SpecifiedAdapter)
    assert adapter_spec(model) is KnownModel.spec


async def test_built_in_adapters_are_specified() -> None:
    async with (
        openai.AsyncOpenAI(base_url=f"{UNREACHABLE}/v1", api_key="k") as oai,
        anthropic.AsyncAnthropic(base_url=UNREACHABLE, api_key="k") as claude,
    ):
        adapters: list[ModelAdapter] = [
            OpenAIAdapter("gpt-4o", client=oai, context_window=128_000),
            AnthropicAdapter("claude-sonnet-4", client=claude, context_window=200_000),
        ]
        assert all(isinstance(a, SpecifiedAdapter) for a in adapters)
        assert [adapter_spec(a).context_window for a in adapters] == [128_000, 200_000]
