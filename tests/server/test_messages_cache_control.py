"""`/v1/messages` to an Anthropic upstream: `cache_control` on the stable prefix; the key as `x-api-key`."""

from __future__ import annotations

import itertools
from typing import Any

import anthropic
import pytest

from contextkeep._config import ContextConfig
from contextkeep.testing import FakeLLMServer
from support.proxy_fixtures import (
    ANTHROPIC_READ_LOG,
    answer_tool_use,
    anthropic_client,
    bodies_sent,
    breakpoints,
    counting_agent,
)

WINDOW = 8192
EPHEMERAL = {"type": "ephemeral"}


def tools(marked: int) -> Any:
    return [
        {
            **ANTHROPIC_READ_LOG,
            "name": f"read_log_{i}",
            **({"cache_control": EPHEMERAL} if i < marked else {}),
        }
        for i in range(2)
    ]


@pytest.fixture
def served(start_proxy):
    upstream = FakeLLMServer(context_window=WINDOW, responder=counting_agent("read_log_0", "w{}.log"))
    server = start_proxy(
        upstream, window=WINDOW, config=ContextConfig(min_keep_tokens=0), upstream_api_key="sk-configured"
    )
    return anthropic_client(server, "cached", api_key="sk-ant-client"), upstream


def run_loop(client: anthropic.Anthropic, calls: int, *, marked_tools: int, system: Any) -> None:
    history: list[Any] = [{"role": "user", "content": "Find the slowest worker."}]
    for step in range(calls):
        message = client.messages.create(
            model="fake-model", max_tokens=512, system=system, messages=history, tools=tools(marked_tools)
        )
        answer_tool_use(history, message, step)


def sent(upstream: FakeLLMServer) -> list[dict[str, Any]]:
    return bodies_sent(upstream, "/v1/messages")


def unmarked(value: Any) -> Any:
    """`value` without `cache_control`, a text block list of one read as the string it stands for."""
    if isinstance(value, dict):
        out = {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
        content = out.get("content")
        if isinstance(content, list) and len(content) == 1 and content[0].get("type") == "text":
            out["content"] = content[0]["text"]
        return out
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def marked_messages(body: dict[str, Any]) -> list[int]:
    return [
        i
        for i, m in enumerate(body["messages"])
        if isinstance(m["content"], list) and any("cache_control" in b for b in m["content"])
    ]


def test_the_breakpoint_marks_the_end_of_what_did_not_change_since_the_previous_call(served):
    client, upstream = served
    system = [{"type": "text", "text": "You are an operations agent.", "cache_control": EPHEMERAL}]
    run_loop(client, 40, marked_tools=1, system=system)
    bodies = sent(upstream)
    assert len(bodies) >= 40
    assert marked_messages(bodies[0]) == []  # nothing sent before: nothing known to be stable
    shifted = 0
    for previous, body in itertools.pairwise(bodies):
        before, now = unmarked(previous["messages"]), unmarked(body["messages"])
        same = next((i for i, (a, b) in enumerate(zip(before, now, strict=False)) if a != b), len(before))
        assert marked_messages(body) == [same - 1]  # one breakpoint: the stable prefix's last message
        shifted += same < len(before)  # compaction rewrote part of the previous view
        assert breakpoints(body) <= 4
        assert body["tools"][0]["cache_control"] == EPHEMERAL  # the client's own are kept
        if unmarked(body["system"]) == unmarked(system):
            assert body["system"] == system
    assert shifted > 0  # the loop went past the window: some calls changed what was sent before


def test_the_clients_four_breakpoints_leave_none_to_place(served):
    client, upstream = served
    system = [
        {"type": "text", "text": "You are an operations agent.", "cache_control": EPHEMERAL},
        {"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL},
    ]
    run_loop(client, 3, marked_tools=2, system=system)
    for body in sent(upstream):
        assert breakpoints(body) == 4 and marked_messages(body) == []
        assert body["system"] == system


def test_the_configured_key_goes_to_an_anthropic_upstream_as_its_x_api_key(served):
    client, upstream = served
    run_loop(client, 2, marked_tools=0, system="You are terse.")
    calls = [r for r in upstream.requests if r.path == "/v1/messages"]
    assert calls and all(r.headers.get("x-api-key") == "sk-configured" for r in calls)
    assert not any("authorization" in r.headers for r in calls)  # no second, conflicting credential
