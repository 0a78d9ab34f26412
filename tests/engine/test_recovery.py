"""Compress-then-retry through the real SDKs against the fake LLM server."""

from __future__ import annotations

from pathlib import Path

import anthropic
import openai
import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._errors import ContextOverflowError, ModelError, OverflowPhase
from contextkeep._events import Event
from contextkeep._manager import ContextManager
from contextkeep._usage import UsageSource
from contextkeep.models import AnthropicAdapter, OpenAIAdapter
from contextkeep.testing import FakeLLMServer, OverflowFormat, UsageMode
from support import closing, rounds

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Investigate the logs."}


def setup(tmp_path: Path, assumed_window: int, **config) -> tuple[ContextManager, list[Event]]:
    """A manager that believes the window is `assumed_window` (so it does not compact on its own)."""
    cm = ContextManager(
        ModelSpec("fake-model", assumed_window),
        config=ContextConfig(**config),
        workspace=tmp_path / "ws",
        tokenizer="tiktoken:o200k_base",
    )
    events: list[Event] = []
    cm.events.subscribe(events.append)
    return cm, events


def openai_adapter(srv: FakeLLMServer) -> OpenAIAdapter:
    client = closing(openai.AsyncOpenAI(base_url=srv.base_url, api_key="test", max_retries=0))
    return OpenAIAdapter("fake-model", client=client)


@pytest.mark.parametrize("fmt", ["openai", "deepseek", "vllm", "llamacpp", "dashscope"])
async def test_an_overflowing_call_is_compacted_and_retried_once(tmp_path: Path, fmt: OverflowFormat) -> None:
    with FakeLLMServer(context_window=3_000, overflow_format=fmt, enforce_max_tokens=False) as srv:
        cm, events = setup(tmp_path, 100_000)
        async with cm.session("c") as s:
            await s.add([SYSTEM, TASK, *rounds(30, size=600)])
            reply = await s.complete(openai_adapter(srv), max_tokens=200)
        assert reply.message.text
        assert s.model_calls == 2  # the failed call and its retry
        chat = [r for r in srv.requests if r.path.endswith("/chat/completions")]
        sizes = [sum(len(str(m.get("content"))) for m in r.body["messages"]) for r in chat]
        assert len(chat) == 2 and sizes[1] < sizes[0]
        kinds = [e.type for e in events if e.type.startswith("model.recovery")]
        assert kinds == ["model.recovery.started", "model.recovery.succeeded"]
        started = next(e for e in events if e.type == "model.recovery.started").to_dict()
        assert started["phase"] in ("INPUT_CONTEXT", "TOTAL_CONTEXT")
        assert s.state.records[-1].reason == "OVERFLOW_RECOVERY"
        assert s.last_usage is not None and s.last_usage.source is UsageSource.PROVIDER_CONFIRMED


async def test_anthropic_overflow_is_recovered_through_its_sdk(tmp_path: Path) -> None:
    with FakeLLMServer(context_window=3_000, enforce_max_tokens=False) as srv:
        cm, events = setup(tmp_path, 100_000)
        client = closing(
            anthropic.AsyncAnthropic(base_url=srv.anthropic_base_url, api_key="test", max_retries=0)
        )
        async with cm.session("c") as s:
            await s.add([SYSTEM, TASK, *rounds(30, size=600)])
            reply = await s.complete(AnthropicAdapter("fake-model", client=client), max_tokens=200)
        assert reply.message.text and s.model_calls == 2
        assert [e.type for e in events if e.type == "model.recovery.succeeded"]


async def test_recovery_gives_up_after_the_configured_attempts(tmp_path: Path) -> None:
    with FakeLLMServer(context_window=200, enforce_max_tokens=False) as srv:  # nothing fits, ever
        cm, events = setup(tmp_path, 100_000, max_token_limit_recovery_attempts=1)
        async with cm.session("c") as s:
            await s.add([SYSTEM, {"role": "user", "content": "word " * 2000}, *rounds(6, size=600)])
            with pytest.raises(ContextOverflowError) as info:
                await s.complete(openai_adapter(srv), max_tokens=50)
        assert info.value.phase is OverflowPhase.INPUT_CONTEXT
        failed = [e.to_dict() for e in events if e.type == "model.recovery.failed"]
        assert failed and failed[-1]["reason"] in ("attempts_exhausted", "nothing_to_compact")
        assert s.model_calls <= 2


async def test_output_and_unknown_errors_are_not_retried(tmp_path: Path) -> None:
    with FakeLLMServer(context_window=50_000) as srv:
        cm, events = setup(tmp_path, 100_000)
        async with cm.session("c") as s:
            await s.add([SYSTEM, TASK, *rounds(3)])
            output_body = {
                "error": {
                    "message": "max_tokens is too large: 100000. This model supports at most 4096 completion tokens, whereas you provided 100000.",
                    "type": "invalid_request_error",
                    "param": "max_tokens",
                    "code": None,
                }
            }
            srv.fail_next(400, output_body)
            with pytest.raises(ContextOverflowError) as info:
                await s.complete(openai_adapter(srv))
            assert info.value.phase is OverflowPhase.OUTPUT
            srv.fail_next(400, {"error": {"message": "This model's maximum context length is 4096 tokens."}})
            with pytest.raises(ContextOverflowError) as unknown:
                await s.complete(openai_adapter(srv))
            assert unknown.value.phase is OverflowPhase.UNKNOWN
            srv.fail_next(
                400,
                {"error": {"message": "Invalid schema for function 'x'", "type": "invalid_request_error"}},
            )
            with pytest.raises(ModelError) as other:
                await s.complete(openai_adapter(srv))
            assert not isinstance(other.value, ContextOverflowError)
        assert s.model_calls == 3  # one each, no retries
        failed = [e.to_dict()["reason"] for e in events if e.type == "model.recovery.failed"]
        assert failed == ["not_recoverable", "not_recoverable"]
        assert not [e for e in events if e.type == "model.recovery.started"]


@pytest.mark.parametrize(
    ("mode", "source"), [("full", UsageSource.PROVIDER_CONFIRMED), ("omit", UsageSource.UNAVAILABLE)]
)
async def test_usage_is_recorded_as_confirmed_or_unavailable(
    tmp_path: Path, mode: UsageMode, source: UsageSource
) -> None:
    with FakeLLMServer(context_window=50_000, usage_mode=mode) as srv:
        cm, events = setup(tmp_path, 50_000)
        async with cm.session("c") as s:
            await s.add([SYSTEM, TASK])
            await s.complete(openai_adapter(srv))
    completed = [e.to_dict() for e in events if e.type == "model.completed"]
    assert completed[-1]["usage_source"] == source.value
    assert completed[-1]["usage_status"] == ("CONFIRMED_BASELINE" if mode == "full" else "NO_CONFIRMED_USAGE")
