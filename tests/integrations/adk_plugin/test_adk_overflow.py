"""The ADK plugin when the provider overflows or fails: compacted and retried, or the error passes."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Literal

import pytest
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import errors as genai_errors

from contextkeep import ContextConfig
from contextkeep._baseline import UsageStatus
from contextkeep._tokens import PromptCounter
from contextkeep.integrations.adk import ContextKeepPlugin
from support.adk_harness import BUDGET, Agent, Managers, ScriptedModel, assert_follows, completed, recoveries


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["gemini", "deepseek"])
async def test_a_provider_overflow_is_compacted_and_retried(
    managers: Managers, billing: PromptCounter, provider: Literal["gemini", "deepseek"]
) -> None:
    cm = managers()
    usage, recovered = completed(cm), recoveries(cm)
    agent = Agent.build(
        ScriptedModel(billing=billing, calls=60, overflow_at=frozenset({40}), error=provider),
        ContextKeepPlugin(cm),
    )
    await agent.start("overflow")

    events = await agent.ask("overflow", "Read the build log, all 60 chunks.")

    seen = agent.model.seen
    assert len(seen) == 62 and [i for i, s in enumerate(seen, 1) if s.failed] == [40]
    failed, retried = seen[39], seen[40]
    assert retried.billed <= failed.billed - 2_000  # compacted by at least the gap the provider reported
    assert retried.orphans == 0 and max(s.billed for s in seen) <= BUDGET
    assert not any(e.error_code for e in events)
    assert events[-1].content.parts[0].text == "Read 60 chunks; the build is clean."
    async with cm.session("overflow") as s:
        await assert_follows(s, agent, "overflow")
        assert "L4" in {r.layer for r in s.state.records}
    assert recovered == ["model.recovery.started", "model.recovery.succeeded"]
    assert [u.input_tokens for u in usage] == [s.billed for s in seen if not s.failed]
    assert {u.usage_status for u in usage} == {UsageStatus.CONFIRMED_BASELINE}


async def test_a_second_overflow_is_retried_as_often_as_configured(
    managers: Managers, billing: PromptCounter
) -> None:
    for attempts in (1, 2):
        cm = managers(
            f"attempts-{attempts}", config=ContextConfig(max_token_limit_recovery_attempts=attempts)
        )
        model = ScriptedModel(billing=billing, calls=15, overflow_at=frozenset({10, 11}))
        agent, recovered = Agent.build(model, ContextKeepPlugin(cm)), recoveries(cm)
        await agent.start("twice")
        if attempts == 2:
            await agent.ask("twice", "Read 15 chunks.")
            seen = model.seen
            assert len(seen) == 18 and seen[11].billed < seen[10].billed < seen[9].billed
            assert recovered == ["model.recovery.started"] * 2 + ["model.recovery.succeeded"]
            continue
        with pytest.raises(genai_errors.ClientError) as raised:  # ADK raises the provider's own error
            await agent.ask("twice", "Read 15 chunks.")
        assert len(model.seen) == 11 and f"input token count ({model.seen[9].billed})" in str(raised.value)
        assert recovered == ["model.recovery.started", "model.recovery.failed attempts_exhausted"]


async def test_other_errors_reach_adk_unchanged(managers: Managers, billing: PromptCounter) -> None:
    class Failing(ScriptedModel):
        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            raise genai_errors.ServerError(
                503, {"error": {"code": 503, "message": "The model is overloaded."}}
            )
            yield  # an async generator, as ADK calls it

    agent = Agent.build(Failing(billing=billing), ContextKeepPlugin(managers()))
    await agent.start("busy")
    with pytest.raises(genai_errors.ServerError, match="overloaded"):
        await agent.ask("busy", "Read the build log.")
