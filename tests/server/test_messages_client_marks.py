"""`/v1/messages` to an Anthropic upstream: the client's own `cache_control` on its messages is kept.

Like Claude Code, the client marks its latest message (and the one before) on every call;
the marks reach the upstream on the same blocks while the view leaves those messages as
they were, beside contextkeep's own breakpoint on the stable prefix, never more than 4 in all.
"""

from __future__ import annotations

import itertools
from typing import Any

import anthropic
import pytest

from contextkeep._config import ContextConfig
from contextkeep.server import ServerSettings, create_app
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support import closing

WINDOW = 8192
OURS = {"type": "ephemeral"}
CLIENT = {"type": "ephemeral", "ttl": "1h"}  # told apart from the proxy's own
TOOLS: Any = [{"name": "read_log", "input_schema": {"type": "object"}}]


def log_output(step: int) -> str:
    return "\n".join(
        f"worker-{step} line {i}: batch {step * 100 + i} took {i * 7 % 97} ms" for i in range(40)
    )


@pytest.fixture(params=[None])
def served(request, tmp_path):
    steps = itertools.count()
    # By default no cut of each new result (5% of 8k): the client's latest message reaches the view unchanged.
    config = request.param or ContextConfig(min_keep_tokens=0, tool_result_limit_max_ratio=None)

    def agent(body: Any) -> Reply:
        step = next(steps)
        return Reply(text=f"step {step}", tool_calls=[ToolCallSpec("read_log", {"name": f"w{step}.log"})])

    with FakeLLMServer(context_window=WINDOW, responder=agent) as upstream:
        settings = ServerSettings(
            store=f"sqlite:///{tmp_path / 'ck.db'}",
            workspace=str(tmp_path / "ws"),
            upstream=upstream.base_url,
            model="fake-model",
            window=WINDOW,
            config=config,
            tokenizer="tiktoken:o200k_base",
        )
        with BackgroundServer(create_app(settings)) as server:
            client = closing(
                anthropic.Anthropic(
                    base_url=server.url,
                    api_key="test",
                    default_headers={"X-Conversation-Id": "marked"},
                    max_retries=0,
                )
            )
            yield client, upstream


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
        [use] = [b for b in reply.content if b.type == "tool_use"]
        history.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        result = {"type": "tool_result", "tool_use_id": use.id, "content": log_output(step)}
        history.append({"role": "user", "content": [result]})
    return sent


def upstream_bodies(upstream: FakeLLMServer) -> list[dict[str, Any]]:
    return [r.body for r in upstream.requests if r.path == "/v1/messages" and r.body.get("messages")]


def marks_in(messages: list[Any], mark: Any) -> list[Any]:
    """The blocks that carry `mark`, without it."""
    return [
        unmarked(b)
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("cache_control") == mark
    ]


def breakpoints(value: Any) -> int:
    if isinstance(value, dict):
        return int("cache_control" in value) + sum(breakpoints(v) for v in value.values())
    if isinstance(value, list):
        return sum(breakpoints(v) for v in value)
    return 0


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
