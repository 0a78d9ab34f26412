"""The agent runner end to end against the fake LLM server."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import openai
import pytest
from pydantic import BaseModel

from contextkeep._agent import Agent, Runner, Tool
from contextkeep._config import ContextConfig
from contextkeep._errors import MaxIterationsError
from contextkeep.models import OpenAIAdapter
from contextkeep.stores import open_store
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support import closing


def adapter(srv: FakeLLMServer, window: int = 50_000) -> OpenAIAdapter:
    client = closing(openai.AsyncOpenAI(base_url=srv.base_url, api_key="t", max_retries=0))
    return OpenAIAdapter("fake-model", client=client, context_window=window)


def lookup(key: str) -> str:
    """Look a key up in the inventory."""
    return f"{key}: 7 units in bin {len(key)}"


async def test_multi_turn_with_tools_survives_a_restart_with_the_same_view(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'state.db'}"
    replies = [
        Reply(tool_calls=[ToolCallSpec("lookup", {"key": "bolts"}), ToolCallSpec("lookup", {"key": "nuts"})]),
        Reply(text="Bolts: 7, nuts: 7."),
        Reply(tool_calls=[ToolCallSpec("lookup", {"key": "washers"})]),
        Reply(text="Washers: 7."),
    ]
    # One runner per process: the first, its restart, and a third that only reads the view.
    runners = [Runner(store=store, workspace=str(tmp_path / "ws")) for _ in range(3)]
    with FakeLLMServer(replies=replies) as srv:
        agent = Agent("stock", adapter(srv), system_prompt="You answer stock questions.", tools=[lookup])
        first = await runners[0].run(agent, "c1", "bolts and nuts?")
        assert first.output == "Bolts: 7, nuts: 7." and first.tool_calls == 2 and first.model_calls == 2
        # Parallel calls ran and both results were recorded.
        assert [m.text for m in first.messages if m.role == "tool"] == [
            "bolts: 7 units in bin 5",
            "nuts: 7 units in bin 4",
        ]
        # A new process: new runner, new manager, same store and workspace.
        second = await runners[1].run(agent, "c1", "and washers?")
        assert second.output == "Washers: 7."
        sent = srv.requests[-1].body["messages"]
        assert [m["role"] for m in sent][:2] == ["system", "user"] and "bolts" in json.dumps(sent)
        views = []
        for runner in runners[1:]:
            async with runner.manager(agent).session("c1", agent_id="stock", agent_version="1") as s:
                views.append(
                    (await s.prepare(tools=[t.schema() for t in [Tool.from_function(lookup)]])).messages
                )
        assert views[0] == views[1]
        for runner in runners:
            await runner.manager(agent).close()
        snapshots = sorted(p.name for p in (tmp_path / "ws/sessions/c1/op_snapshots").iterdir())
        assert snapshots == ["step_001_lookup.json", "step_002_lookup.json", "step_003_lookup.json"]


def _recalling_agent(body: Mapping[str, Any]) -> Reply:
    """Dump a long report, run checks until the report leaves the view, recall its detail, answer."""
    messages = body["messages"]
    done = [c["function"]["name"] for m in messages for c in (m.get("tool_calls") or [])]
    refs = re.findall(r"\[Full detail available at: ([^\]]+)\]", json.dumps(messages))
    if "recall" in done:
        found = re.findall(r"shard-\d+ FAILED", json.dumps(messages))
        return Reply(text="The failing shard is " + found[-1].split()[0])
    if refs:
        return Reply(tool_calls=[ToolCallSpec("recall", {"reference": refs[0], "pattern": "FAILED"})])
    if "dump_report" not in done:
        return Reply(tool_calls=[ToolCallSpec("dump_report")])
    return Reply(tool_calls=[ToolCallSpec("check", {"n": len(done)})])


async def test_the_agent_recalls_a_detail_that_was_masked(tmp_path: Path) -> None:
    def dump_report() -> str:
        """The nightly report."""
        return "\n".join(
            [f"shard-{i} ok" for i in range(200)][:150] + ["shard-173 FAILED: disk full"] + ["end"] * 30
        )

    def check(n: int) -> str:
        """A health check."""
        return f"check {n} passed " + "." * 2000

    config = ContextConfig(
        max_observation_age_rounds=2,
        min_keep_recent_rounds=1,
        min_keep_tokens=0,
        tool_result_limit_max_ratio=None,  # the report must reach the view whole before L1 masks it
        drop_digest_tokens=0,  # the digest of dropped rounds would keep the failing line in view
    )
    with FakeLLMServer(responder=_recalling_agent) as srv:
        agent = Agent("ops", adapter(srv, window=2_600), tools=[dump_report, check], config=config)
        turn = await Runner(workspace=str(tmp_path / "ws")).run(agent, "night", "Which shard failed?")
    assert turn.output == "The failing shard is shard-173"
    recall_result = [m.text for m in turn.messages if m.role == "tool"][-1]
    assert "shard-173 FAILED: disk full" in recall_result
    masked = [
        m
        for r in srv.requests
        for m in r.body["messages"]
        if "Full detail available at" in str(m.get("content"))
    ]
    assert masked and "shard-173" not in str(masked[0]["content"])  # it really had left the view


async def test_a_run_without_a_conversation_id_persists_nothing(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    with FakeLLMServer(
        replies=[Reply(tool_calls=[ToolCallSpec("lookup", {"key": "x" * 400})]), Reply(text="ok")]
    ) as srv:
        agent = Agent("stock", adapter(srv), tools=[lookup])
        turn = await Runner(store=store_url, workspace=str(tmp_path / "ws")).run(agent, None, "hi")
    assert turn.output == "ok" and turn.tool_calls == 1
    store = open_store(store_url)
    assert await store.list_conversations() == []
    await store.close()
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").rglob("*"))


async def test_max_iterations_and_tool_errors(tmp_path: Path) -> None:
    forever = Reply(tool_calls=[ToolCallSpec("lookup", {"key": "x", "bogus": 1})])
    with FakeLLMServer(responder=lambda body: forever) as srv:
        agent = Agent("loop", adapter(srv), tools=[lookup], max_iterations=3)
        with pytest.raises(MaxIterationsError, match="max_iterations=3"):
            await Runner(workspace=str(tmp_path / "ws")).run(agent, "c", "go")
        sent = srv.requests[-1].body["messages"]
        assert sent[-1]["content"].startswith("Error: unknown argument(s): ['bogus']")


class Order(BaseModel):
    sku: str
    quantity: int


def test_tool_schemas_come_from_type_hints() -> None:
    def place(order: Order, priority: Literal["low", "high"] = "low", note: str | None = None) -> str:
        """Place an order.

        Longer text is not part of the description."""
        return f"{order.quantity}x{order.sku} {priority}"

    schema = Tool.from_function(place).schema()["function"]
    assert schema["description"] == "Place an order."
    params = schema["parameters"]
    assert params["required"] == ["order"]
    assert params["properties"]["order"]["properties"]["quantity"] == {"title": "Quantity", "type": "integer"}
    assert params["properties"]["priority"]["enum"] == ["low", "high"]
