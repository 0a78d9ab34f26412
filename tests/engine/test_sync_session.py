"""`SyncSession`: a typed, written-out blocking twin of every public `Session` method."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contextkeep import SyncSession
from contextkeep._config import ContextConfig
from contextkeep._errors import ContextOverflowError, OverflowPhase
from contextkeep._events import Event
from contextkeep._messages import Message
from contextkeep._session import Session
from contextkeep._usage import Usage
from contextkeep.models.adapter import ModelReply
from support import manager, rounds

SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Find out why the nightly job fails."}


def test_every_public_session_method_and_attribute_has_a_typed_blocking_twin(tmp_path: Path) -> None:
    names = {n for n in dir(Session) if not n.startswith("_")}
    async_methods = {n for n in names if inspect.iscoroutinefunction(getattr(Session, n))}
    assert {"add", "prepare", "record", "complete", "compress", "recover", "snapshot"} <= async_methods
    for name in sorted(names):
        own, twin = inspect.getattr_static(Session, name), inspect.getattr_static(SyncSession, name, None)
        assert twin is not None, f"SyncSession lacks {name}"
        if isinstance(own, property):
            assert isinstance(twin, property), name
            continue
        assert not inspect.iscoroutinefunction(twin), name
        # Same parameters, defaults and annotations; an async method's twin returns what it awaits.
        assert inspect.signature(twin) == inspect.signature(own), name
    # What a session sets on itself (its id, scope, config, counter...) is a property of the twin.
    session = manager(tmp_path).new_session("c")
    for name in (n for n in vars(session) if not n.startswith("_")):
        assert isinstance(inspect.getattr_static(SyncSession, name, None), property), name


class _OverflowOnce:
    """An adapter whose first call overflows at half the prompt; later calls answer with full usage."""

    def __init__(self) -> None:
        self.prompts: list[int] = []

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        local_prompt_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        tokens = local_prompt_tokens or 0
        self.prompts.append(tokens)
        if len(self.prompts) == 1:
            raise ContextOverflowError(
                "prompt too long", phase=OverflowPhase.INPUT_CONTEXT, limit=tokens // 2, requested=tokens
            )
        return ModelReply(Message("assistant", "The job runs out of disk."), Usage(tokens, 8))


def test_a_short_conversation_runs_through_the_sync_twin(tmp_path: Path) -> None:
    cm = manager(tmp_path, 100_000)
    events: list[Event] = []
    cm.events.subscribe(events.append)
    adapter = _OverflowOnce()
    with cm.sync_session("c") as s:
        stored = s.add([SYSTEM, TASK, *rounds(12)])
        assert [m.id for m in stored] == [m.id for m in s.transcript] and s.conversation_id == "c"
        view = s.prepare()
        assert not view.compacted and view.tokens < (s.budget().effective or 0)
        s.record({"role": "assistant", "content": "Reading the logs."}, Usage(view.tokens, 5))
        assert s.usage.valid and s.last_usage is not None and s.usage.baseline == view.tokens + 5
        s.add({"role": "user", "content": "And?"})
        reply = s.complete(adapter, max_tokens=100)
        assert reply.message.text == "The job runs out of disk." and s.model_calls == 2
        assert adapter.prompts[1] < adapter.prompts[0]  # recovered (layer 4) and retried
        assert s.state.records[-1].reason == "OVERFLOW_RECOVERY"
        assert s.compress() is None  # far below the trigger now
        assert s.compress_context(ContextConfig(trigger_ratio=0.9)) is None
        ref = s.snapshot(
            "grep_logs", {"action": "grep_logs", "observation": "disk full"}, summary="disk full"
        )
        assert s.state.progress[-1].reference == ref
        assert not s.reset_breaker().breaker_open
        assert s.update_state(lambda state: state.evolve(failures=1)).failures == 1
        s.load()
        assert s.current_view().tokens <= view.tokens and s.model.key == "test-model"
        transcript = s.transcript
    with cm.sync_session("c") as again:  # the store holds it all: another session reads it back
        assert again.transcript == transcript and again.state.failures == 1
    kinds = [e.type for e in events]
    assert "model.recovery.succeeded" in kinds and kinds.count("model.completed") == 2
