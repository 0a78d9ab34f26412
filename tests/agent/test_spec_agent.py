"""Issue 15, agent side: Ollama's silent truncation caught on every path, `on_system_prompt` hooks
and skills as AgentScope assembles the system prompt, and `max_iterations` bounding retries.

Everything runs over real HTTP against the fake LLM server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from contextkeep._agent import Agent, Runner
from contextkeep._capabilities import ModelSpec
from contextkeep._compaction import CompactionState, ProgressStep, default_progress_hook
from contextkeep._compaction.builder import ViewBuilder
from contextkeep._config import ContextConfig
from contextkeep._errors import ConfigError, ContextOverflowError, MaxIterationsError, OverflowPhase
from contextkeep._events import Event
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._rounds import RoundTracker
from contextkeep._tokens import counter_for_model
from contextkeep.models import ModelReply, OpenAIAdapter
from contextkeep.server import ServerSettings, create_app
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec, default_counter
from support import closing, rounds

NUM_CTX = 512
SYSTEM = {"role": "system", "content": "You are a careful agent."}
TASK = {"role": "user", "content": "Investigate the logs."}
HUGE = "word " * 3_750  # about 3,757 prompt tokens with the system prompt: far past Ollama's 512


def chat_requests(srv: FakeLLMServer) -> list[dict[str, Any]]:
    return [r.body for r in srv.requests if r.path == "/v1/chat/completions"]


def adapter(srv: FakeLLMServer, window: int = 50_000) -> OpenAIAdapter:
    client = closing(openai.AsyncOpenAI(base_url=srv.base_url, api_key="t", max_retries=0))
    return OpenAIAdapter("fake-model", client=client, context_window=window)


def manager(tmp_path: Path, window: int, **kwargs: Any) -> tuple[ContextManager, list[Event]]:
    cm = ContextManager(
        ModelSpec("fake-model", window), workspace=tmp_path / "ws", tokenizer="tiktoken:o200k_base", **kwargs
    )
    events: list[Event] = []
    cm.events.subscribe(events.append)
    return cm, events


def system_sent(srv: FakeLLMServer, index: int = -1) -> str:
    first = chat_requests(srv)[index]["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


# -- point 7: Ollama's silent truncation ------------------------------------------------------------


async def test_session_complete_reports_a_silent_ollama_truncation_instead_of_recording_it(
    tmp_path: Path,
) -> None:
    with FakeLLMServer(context_window=NUM_CTX, overflow_format="ollama") as srv:
        cm, events = manager(tmp_path, NUM_CTX)
        async with cm.session("c") as s:
            await s.add([SYSTEM, {"role": "user", "content": HUGE}])
            local = (await s.current_view()).tokens
            with pytest.raises(ContextOverflowError) as caught:
                await s.complete(adapter(srv, NUM_CTX))
            assert [m.role for m in s.transcript] == ["system", "user"]  # the mutilated answer is not kept
    err = caught.value
    assert (err.phase, err.provider, err.limit, err.requested) == (
        OverflowPhase.INPUT_CONTEXT,
        "ollama",
        NUM_CTX,
        local,
    )
    assert local > 3_700
    assert chat_requests(srv)[0]["messages"][-1]["content"] == HUGE  # it was sent, and answered "ok"
    assert [e.to_dict()["reason"] for e in events if e.type == "model.recovery.failed"] == [
        "nothing_to_compact"
    ]


async def test_session_complete_compacts_and_retries_after_a_silent_truncation(tmp_path: Path) -> None:
    # The manager budgets for a big window; Ollama runs with num_ctx 512 and cuts without a word.
    with FakeLLMServer(context_window=NUM_CTX, overflow_format="ollama") as srv:
        cm, events = manager(tmp_path, 100_000)
        async with cm.session("c") as s:
            await s.add([SYSTEM, TASK, *rounds(24, size=600)])
            srv.enqueue("answer to the truncated prompt", "answer to the whole prompt")
            reply = await s.complete(adapter(srv, NUM_CTX))
            assert s.model_calls == 2
            assert s.transcript[-1].text == reply.message.text == "answer to the whole prompt"
    sent = chat_requests(srv)
    assert default_counter(sent[0]) > 3 * NUM_CTX and default_counter(sent[1]) <= NUM_CTX
    kinds = [e.type for e in events if e.type.startswith("model.recovery")]
    assert kinds == ["model.recovery.started", "model.recovery.succeeded"]


async def test_runner_reports_a_silent_ollama_truncation(tmp_path: Path) -> None:
    with FakeLLMServer(context_window=NUM_CTX, overflow_format="ollama") as srv:
        agent = Agent("ops", adapter(srv, NUM_CTX), system_prompt="You are terse.", recall=False)
        runner = Runner(workspace=str(tmp_path / "ws"))
        with pytest.raises(ContextOverflowError) as caught:
            await runner.run(agent, "c", HUGE)
        async with runner.manager(agent).session("c", agent_id="ops", agent_version="1") as s:
            assert [m.role for m in s.transcript] == ["system", "user"]
    assert (caught.value.provider, caught.value.limit) == ("ollama", NUM_CTX)
    assert len(chat_requests(srv)) == 1


async def test_a_users_adapter_receives_the_views_local_count_as_a_declared_keyword(tmp_path: Path) -> None:
    class OwnAdapter:
        """An adapter a user wrote: it takes the count by name and no other option."""

        def __init__(self) -> None:
            self.counts: list[int | None] = []

        @property
        def spec(self) -> ModelSpec:
            return ModelSpec("fake-model", 100_000)

        async def complete(
            self,
            messages: Sequence[Message],
            *,
            tools: Sequence[Mapping[str, Any]] | None = None,
            max_tokens: int | None = None,
            local_prompt_tokens: int | None = None,
            **options: Any,
        ) -> ModelReply:
            self.counts.append(local_prompt_tokens)
            return ModelReply(Message("assistant", "done"))

    cm, _ = manager(tmp_path, 100_000)
    own = OwnAdapter()
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK])
        view = await s.current_view()
        await s.complete(own)
    assert own.counts == [view.tokens] and view.tokens > 0


@pytest.fixture
def ollama_proxy(tmp_path: Path):
    with FakeLLMServer(context_window=NUM_CTX, overflow_format="ollama") as upstream:
        settings = ServerSettings(
            store=f"sqlite:///{tmp_path / 'ck.db'}",
            workspace=str(tmp_path / "ws"),
            upstream=upstream.base_url,
            model="fake-model",
            window=NUM_CTX,
            config=ContextConfig(min_keep_tokens=0),
            tokenizer="tiktoken:o200k_base",
        )
        with BackgroundServer(create_app(settings)) as server:
            yield server, upstream


def proxy_client(server: Any, conversation: str) -> openai.OpenAI:
    headers = {"X-Conversation-Id": conversation}
    return closing(
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="t", default_headers=headers, max_retries=0)
    )


def test_the_proxy_reports_a_silent_ollama_truncation_as_an_overflow(ollama_proxy) -> None:
    server, upstream = ollama_proxy
    messages: Any = [SYSTEM, {"role": "user", "content": HUGE}]
    with pytest.raises(openai.BadRequestError) as caught:
        proxy_client(server, "p-1").chat.completions.create(model="fake-model", messages=messages)
    assert caught.value.code == "context_length_exceeded"
    assert "silently truncated" in caught.value.message
    assert len(chat_requests(upstream)) == 1  # answered "ok" by the upstream, refused by the proxy


def test_the_proxy_reports_a_silent_truncation_at_the_end_of_a_stream(ollama_proxy) -> None:
    server, upstream = ollama_proxy
    messages: Any = [SYSTEM, {"role": "user", "content": HUGE}]
    stream = proxy_client(server, "p-2").chat.completions.create(
        model="fake-model", messages=messages, stream=True
    )
    with pytest.raises(openai.APIError, match="silently truncated"):
        list(stream)
    # Not retried: a second reply would have followed the first on the same stream.
    assert len(chat_requests(upstream)) == 1


# -- point 9: on_system_prompt hooks and skills ----------------------------------------------------


async def test_an_async_hooks_text_reaches_the_model_and_changes_only_with_its_answer(tmp_path: Path) -> None:
    cwd = ["/srv/app-a"]

    async def working_directory(system: str, steps: Sequence[ProgressStep]) -> str:
        await asyncio.sleep(0)  # a real await: the hook is a coroutine function
        return f"{system}\nWorking directory: {cwd[0]}"

    with FakeLLMServer() as srv:
        cm, _ = manager(tmp_path, 50_000, hooks=(default_progress_hook, working_directory))
        async with cm.session("c") as s:
            await s.add([SYSTEM, TASK])
            await s.complete(adapter(srv))
            await s.add({"role": "user", "content": "And now?"})
            await s.complete(adapter(srv))
            cwd[0] = "/srv/app-b"
            await s.add({"role": "user", "content": "Moved."})
            await s.complete(adapter(srv))
    first, second, third = (system_sent(srv, i) for i in range(3))
    assert first == "You are a careful agent.\nWorking directory: /srv/app-a"
    assert second == first  # same answer, same prefix: the provider's prompt cache holds
    assert third == "You are a careful agent.\nWorking directory: /srv/app-b"


async def test_an_async_hook_and_task_progress_both_survive_a_compaction_pass(tmp_path: Path) -> None:
    async def environment(system: str, steps: Sequence[ProgressStep]) -> str:
        return f"{system}\n[env: staging]"

    cm, _ = manager(tmp_path, 4_000, hooks=(default_progress_hook, environment))
    async with cm.session("c") as s:
        await s.add([SYSTEM, TASK, *rounds(30, size=600)])
        await s.snapshot(
            "grep_logs", {"action": "grep_logs", "observation": "3 timeouts"}, summary="3 timeouts"
        )
        view = await s.prepare()
    assert view.compacted  # a compaction pass ran, and it showed the progress made so far
    system = view.neutral[0].text
    assert system.startswith("You are a careful agent.\n## Task progress")
    assert "grep_logs: 3 timeouts" in system and system.endswith("\n[env: staging]")


async def test_building_a_view_before_an_async_hook_is_resolved_names_the_hook() -> None:
    async def working_directory(system: str, steps: Sequence[ProgressStep]) -> str:
        return system + "\ncwd: /srv"

    builder = ViewBuilder(ContextConfig(), counter_for_model("fake-model", "heuristic"), [working_directory])
    transcript = [Message("system", "You are terse."), Message("user", "ls")]
    tracker = RoundTracker()
    for m in transcript:
        tracker.append(m)
    with pytest.raises(ConfigError, match="working_directory"):
        builder.build(transcript, tracker.rounds, CompactionState())
    await builder.resolve_system(transcript, tracker.rounds, CompactionState())
    assert builder.build(transcript, tracker.rounds, CompactionState())[0].text == "You are terse.\ncwd: /srv"


async def test_hooks_given_to_the_runner_and_to_the_agent_both_apply_in_that_order(tmp_path: Path) -> None:
    def runner_hook(system: str, steps: Sequence[ProgressStep]) -> str:
        return system + "\n[runner: region eu-west]"

    async def agent_hook(system: str, steps: Sequence[ProgressStep]) -> str:
        return system + "\n[agent: on call]"

    with FakeLLMServer(replies=["Done."]) as srv:
        agent = Agent("ops", adapter(srv), system_prompt="You are terse.", hooks=[agent_hook], recall=False)
        turn = await Runner(workspace=str(tmp_path / "ws"), hooks=[runner_hook]).run(agent, "c", "status?")
    assert turn.output == "Done."
    assert system_sent(srv) == "You are terse.\n[runner: region eu-west]\n[agent: on call]"


async def test_skill_instructions_follow_the_system_prompt_before_the_hooks(tmp_path: Path) -> None:
    from contextkeep._agent import Skill  # imported here: every other test runs on code without skills

    pdf = tmp_path / "skills" / "pdf"
    pdf.mkdir(parents=True)
    (pdf / "SKILL.md").write_text(
        "---\nname: pdf\ndescription: Read, merge and split PDF files.\n---\n# How to\nUse pdftotext first.\n"
    )

    async def clock(system: str, steps: Sequence[ProgressStep]) -> str:
        return system + "\n[time: 09:00]"

    skills = [Skill.from_directory(pdf), Skill("sql", "Query the reporting database read-only.")]
    with FakeLLMServer(replies=["Done.", "Done again."]) as srv:
        runner = Runner(workspace=str(tmp_path / "ws"))
        agent = Agent("docs", adapter(srv), system_prompt="You file reports.", skills=skills, hooks=[clock])
        await runner.run(agent, "c", "merge the two reports")
        # No system prompt of its own: the skills still get one.
        bare = Agent("bare", adapter(srv), skills=skills[1:], recall=False)
        await runner.run(bare, "c2", "how many orders?")
    system = system_sent(srv, 0)
    assert system.startswith("You file reports.\n\n# Agent skills\n")
    assert f'## pdf\nRead, merge and split PDF files.\nRead "{pdf}/SKILL.md" for how to use it.' in system
    assert "## sql\nQuery the reporting database read-only." in system
    assert system.endswith("\n[time: 09:00]")
    assert "pdftotext" not in system  # only the name and description, up front
    assert system_sent(srv, 1).startswith("# Agent skills\n") and "## sql" in system_sent(srv, 1)


# -- point 13: max_iterations bounds recovery retries ---------------------------------------------

OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 2000 tokens. However, your messages "
        "resulted in 4600 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


async def test_a_recovery_retry_is_one_of_the_agents_iterations(tmp_path: Path) -> None:
    forever = Reply(tool_calls=[ToolCallSpec("lookup", {"key": "bolts"})])
    with FakeLLMServer(responder=lambda body: forever) as srv:
        looked_up = 0

        def lookup(key: str) -> str:
            """Look a key up in the inventory."""
            nonlocal looked_up
            looked_up += 1
            if looked_up == 6:  # the 7th model call, the last one allowed, overflows
                srv.fail_next(400, OVERFLOW)
            return f"{key}: 7 units"

        agent = Agent("stock", adapter(srv), tools=[lookup], max_iterations=7, recall=False)
        events: list[Event] = []
        runner = Runner(workspace=str(tmp_path / "ws"), listeners=[events.append])
        async with runner.manager(agent).session("c", agent_id="stock", agent_version="1") as s:
            # An earlier turn: old rounds a recovery could compact away, so a retry would be possible.
            await s.add([SYSTEM, TASK, *rounds(20, size=600), {"role": "assistant", "content": "Done."}])
        with pytest.raises(MaxIterationsError, match="max_iterations=7") as caught:
            await runner.run(agent, "c", "count the bolts")
    assert len(chat_requests(srv)) == 7  # the overflowing 7th call was not retried as an 8th
    assert isinstance(caught.value.__cause__, MaxIterationsError)
    assert isinstance(caught.value.__cause__.__cause__, ContextOverflowError)
    failed = [e.to_dict()["reason"] for e in events if e.type == "model.recovery.failed"]
    assert failed == ["max_calls_reached"]
    assert not [e for e in events if e.type == "model.recovery.started"]  # no compaction for a retry not made
