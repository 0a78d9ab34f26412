"""`/v1/messages` to an Anthropic upstream: the client's own `cache_control` on its messages is kept.

Like Claude Code, the client marks its latest message (and the one before) on every call;
the marks reach the upstream on the same blocks while the view leaves those messages as
they were, beside contextkeep's own breakpoint on the stable prefix, never more than 4 in all.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from contextkeep._config import ContextConfig
from contextkeep.testing import FakeLLMServer
from support.proxy_fixtures import (
    answer_tool_use,
    anthropic_client,
    bodies_sent,
    breakpoints,
    counting_agent,
)

WINDOW = 8192
OURS = {"type": "ephemeral"}
CLIENT = {"type": "ephemeral", "ttl": "1h"}  # told apart from the proxy's own
TOOLS: Any = [{"name": "read_log", "input_schema": {"type": "object"}}]


@pytest.fixture(params=[None])
def served(request, start_proxy):
    # By default no cut of each new result (5% of 8k): the client's latest message reaches the view unchanged.
    config = request.param or ContextConfig(min_keep_tokens=0, tool_result_limit_max_ratio=None)
    upstream = FakeLLMServer(context_window=WINDOW, responder=counting_agent(log="w{}.log"))
    return anthropic_client(start_proxy(upstream, window=WINDOW, config=config), "marked"), upstream


def unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def marked_last(history: list[Any], count: int) -> list[Any]:
    """`history` with the client's mark on the last block of each of its last `count` user messages."""
    out: list[Any] = unmarked(history)
    users = [i for i, m in enumerate(out) if m["role"] == "user"][-count:]
    for i in users:
        content = out[i]["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out[i] = {**out[i], "content": [*blocks[:-1], {**blocks[-1], "cache_control": CLIENT}]}
    return out


def run_loop(client: anthropic.Anthropic, calls: int, *, marks: int, system: Any) -> list[list[Any]]:
    """A tool loop whose client marks its last `marks` user messages; the histories it sent."""
    history: list[Any] = [{"role": "user", "content": "Find the slowest worker."}]
    sent: list[list[Any]] = []
    for step in range(calls):
        messages = marked_last(history, marks)
        sent.append(messages)
        reply = client.messages.create(
            model="fake-model", max_tokens=512, system=system, messages=messages, tools=TOOLS
        )
        answer_tool_use(history, reply, step)
    return sent


def upstream_bodies(upstream: FakeLLMServer) -> list[dict[str, Any]]:
    return bodies_sent(upstream, "/v1/messages")


def marks_in(messages: list[Any], mark: Any) -> list[Any]:
    """The blocks that carry `mark`, without it."""
    return [
        unmarked(b)
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("cache_control") == mark
    ]


def test_the_clients_marks_reach_the_upstream_on_the_same_blocks_beside_the_stable_prefix_mark(served):
    client, upstream = served
    sent = run_loop(client, 30, marks=1, system="You are an operations agent.")
    bodies = upstream_bodies(upstream)
    assert len(bodies) == len(sent)  # nothing refused and retried
    compacted = 0
    for messages, body in zip(sent, bodies, strict=True):
        assert marks_in(body["messages"], CLIENT) == marks_in(
            messages, CLIENT
        )  # the latest message: unchanged
        assert breakpoints(body) <= 4
        compacted += len(body["messages"]) < len(messages)
    assert compacted > 0  # the view was compacted, and the marks still went where the client put them
    assert sum(bool(marks_in(b["messages"], OURS)) for b in bodies[1:]) == len(bodies) - 1  # ours too


def test_the_clients_four_marks_take_every_breakpoint(served):
    client, upstream = served
    system = [
        {"type": "text", "text": "You are an operations agent.", "cache_control": CLIENT},
        {"type": "text", "text": "Be brief.", "cache_control": CLIENT},
    ]
    sent = run_loop(client, 6, marks=2, system=system)
    for messages, body in zip(sent, upstream_bodies(upstream), strict=True):
        assert body["system"] == system
        assert marks_in(body["messages"], CLIENT) == marks_in(messages, CLIENT)
        assert marks_in(body["messages"], OURS) == []  # no room left for the proxy's own
        assert breakpoints(body) == breakpoints(system) + len(marks_in(messages, CLIENT)) <= 4


@pytest.mark.parametrize("served", [ContextConfig(min_keep_tokens=0)], indirect=True)
def test_a_marked_message_the_view_changed_goes_without_the_clients_mark(served):
    client, upstream = served
    sent = run_loop(client, 2, marks=1, system="You are an operations agent.")
    body = upstream_bodies(upstream)[-1]
    [result] = body["messages"][-1]["content"]
    [original] = marks_in(sent[-1], CLIENT)
    assert len(result["content"]) < len(original["content"])  # cut to 5% of the window
    assert marks_in(body["messages"], CLIENT) == []  # that block is not the one the client marked
