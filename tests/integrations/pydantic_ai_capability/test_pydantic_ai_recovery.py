"""`ContextKeepCapability` on provider errors: an overflow compacted and retried (streamed too), bounded, others pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.exceptions import ModelContextWindowExceededError, ModelHTTPError, ModelServerError
from pydantic_ai.messages import (
    ModelResponse,
)

from contextkeep._events import Event
from support.pydantic_ai_harness import (
    LIMITS,
    SPEC,
    TASK,
    Managers,
    agent,
    assert_transcript_is_history,
    provider,
)


async def test_overflow_is_compacted_and_retried_once(managers: Managers, deepseek_tokenizer: Path) -> None:
    cm = managers()
    events: list[Event] = []
    cm.events.subscribe(
        events.append, "model.recovery.started", "model.recovery.succeeded", "model.recovery.failed"
    )
    p = provider(deepseek_tokenizer, calls=24, fail=[20])
    a, capability = agent(cm, p)
    result = await a.run(TASK, usage_limits=LIMITS)

    # Request 20 failed; the same step was attempted again, compacted by at least the reported gap.
    assert len(p.requests) == 24 + 2
    assert p.tokens[21] <= p.tokens[20] - 300
    assert [e.type for e in events] == ["model.recovery.started", "model.recovery.succeeded"]
    # The failed attempt left no trace in the run's history or the transcript.
    assert len(result.all_messages()) == 2 + 2 * 24
    await assert_transcript_is_history(capability, result.all_messages())


async def test_recovery_is_bounded_and_other_errors_pass(
    managers: Managers, deepseek_tokenizer: Path
) -> None:
    cm = managers()
    events: list[Event] = []
    cm.events.subscribe(events.append, "model.recovery.failed")
    p = provider(deepseek_tokenizer, calls=12, fail=range(8, 100))
    a, _ = agent(cm, p)
    with pytest.raises(ModelContextWindowExceededError):
        await a.run(TASK, usage_limits=LIMITS)
    # One compact-and-retry (max_token_limit_recovery_attempts=1), then the error reaches the caller.
    assert len(p.requests) == 8 + 2
    assert [getattr(e, "reason", None) for e in events] == ["attempts_exhausted"]

    # A server error is not an overflow: it reaches the caller as it was, nothing compacted.
    other = managers("memory://")
    other.events.subscribe(events.append)
    events.clear()
    server = ModelHTTPError.for_category(ModelServerError, status_code=500, model_name=SPEC.key, body=None)
    failing = provider(deepseek_tokenizer, calls=12, fail=[3], error=lambda: server)
    b, _ = agent(other, failing)
    with pytest.raises(ModelHTTPError) as raised:
        await b.run(TASK, usage_limits=LIMITS)
    assert not [e for e in events if e.type.startswith("model.recovery")]
    assert raised.value is server and len(failing.requests) == 4


async def test_streamed_run_and_its_recovery(managers: Managers, deepseek_tokenizer: Path) -> None:
    cm = managers()
    events: list[Event] = []
    cm.events.subscribe(events.append, "model.recovery.started", "model.recovery.succeeded")
    p = provider(deepseek_tokenizer, calls=24, fail=[18])
    a, capability = agent(cm, p, stream=True)
    async with a.run_stream(TASK, usage_limits=LIMITS) as run:
        output = await run.get_output()
    assert output == "The cache is invalidated in session.py."
    history = run.all_messages()
    assert len(history) == 2 + 2 * 24
    assert len(p.requests[-1]) < len(history)
    await assert_transcript_is_history(capability, history)
    last = history[-1]
    assert isinstance(last, ModelResponse)
    assert (await capability.session()).usage.output_tokens == last.usage.output_tokens
    # The overflow came as the stream opened: compacted, and the same step streamed again.
    assert [e.type for e in events] == ["model.recovery.started", "model.recovery.succeeded"]
    assert p.tokens[19] <= p.tokens[18] - 300
