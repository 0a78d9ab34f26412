"""The proxy budgets for the upstream's real window: its model list first, then what its overflow errors state."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from contextkeep._capabilities import CapacitySource
from contextkeep._config import ContextConfig
from contextkeep._manager import ContextManager
from contextkeep.server import ServerSettings, create_app
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support import SSECollector, closing, types

WINDOW = 16_384
MODEL = "gpt-4o-mini"  # the registry says 128,000 tokens
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "read_log",
            "description": "Read one log file.",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    }
]


def agent_step(body: Any) -> Reply:
    step = sum(1 for m in body["messages"] if m["role"] == "tool")
    return Reply(text=f"step {step}", tool_calls=[ToolCallSpec("read_log", {"name": f"worker-{step}.log"})])


def log_output(step: int, size: int = 20_000) -> str:
    """About `size` bytes of a distinct log (every line differs, as real output does)."""
    lines: list[str] = []
    total = 0
    while total < size:
        line = f"worker-{step} line {len(lines)}: batch {step * 1000 + len(lines)} took {len(lines) * 7 % 997} ms"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)


def serve(tmp_path: Path, upstream: FakeLLMServer, **more: Any) -> BackgroundServer:
    settings = ServerSettings(
        store=f"sqlite:///{tmp_path / 'ck.db'}",
        workspace=str(tmp_path / "ws"),
        upstream=upstream.base_url,
        model=MODEL,
        tokenizer="tiktoken:o200k_base",  # the fake upstream counts with it
        **more,
    )
    return BackgroundServer(create_app(settings))


def run_agent(server: BackgroundServer, conversation: str, calls: int, **create: Any) -> None:
    """A tool loop of `calls` model calls; any error the client sees raises (no SDK retries)."""
    client = closing(
        openai.OpenAI(
            base_url=f"{server.url}/v1",
            api_key="test",
            default_headers={"X-Conversation-Id": conversation},
            max_retries=0,
        )
    )
    history: Any = [
        {"role": "system", "content": "You are an operations agent. Read the logs one by one."},
        {"role": "user", "content": "Find the slowest worker."},
    ]
    for step in range(calls):
        message = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, **create)
        reply = message.choices[0].message.model_dump(exclude_none=True)
        history.append(reply)
        for call in reply["tool_calls"]:
            history.append({"role": "tool", "tool_call_id": call["id"], "content": log_output(step)})


def chat_calls(upstream: FakeLLMServer) -> int:
    return sum(1 for r in upstream.requests if r.path == "/v1/chat/completions")


@pytest.mark.slow
def test_237_calls_fit_the_window_the_upstream_reports_without_a_window_flag(tmp_path):
    with (
        FakeLLMServer(
            model=MODEL, context_window=WINDOW, overflow_format="vllm", responder=agent_step
        ) as upstream,
        serve(tmp_path, upstream) as server,
    ):
        health = httpx.get(f"{server.url}/api/health").json()
        assert (health["context_window"], health["capacity_source"]) == (WINDOW, "upstream")
        run_agent(server, "long-run", 237)  # 0 client-visible errors
        assert chat_calls(upstream) - 237 <= 2  # recoveries (each is one more upstream call)
        assert sum(1 for r in upstream.requests if r.path == "/v1/models") == 1  # asked once


@pytest.mark.slow
def test_a_stated_limit_corrects_the_window_for_good(tmp_path):
    # The upstream does not list the model: the registry's 128,000 is all the proxy knows at first.
    with (
        FakeLLMServer(
            model="served-under-another-name",
            context_window=WINDOW,
            overflow_format="vllm",
            responder=agent_step,
        ) as upstream,
        serve(tmp_path, upstream) as server,
    ):
        assert httpx.get(f"{server.url}/api/health").json()["capacity_source"] == "registry"
        with SSECollector(f"{server.url}/api/conversations/corrected/events") as stream:
            run_agent(server, "corrected", 60)
            events = stream.wait_for(lambda ev: "context.capacity.corrected" in types(ev))
        assert chat_calls(upstream) - 60 <= 2
        (corrected,) = [data for kind, data in events if kind == "context.capacity.corrected"]
        assert (corrected["context_window"], corrected["previous_window"]) == (WINDOW, 128_000)
        assert corrected["previous_source"] == "registry"

    async def reopened() -> tuple[int | None, CapacitySource]:
        # Persisted: another process on the same store budgets for the stated window from the start.
        cm = ContextManager(MODEL, store=f"sqlite:///{tmp_path / 'ck.db'}", workspace=tmp_path / "ws")
        async with cm.session("corrected") as s:
            budget = s.budget()
        await cm.close()
        return budget.context_window, budget.capacity_source

    assert asyncio.run(reopened()) == (WINDOW, CapacitySource.PROVIDER_ERROR)


def test_one_retry_fits_the_window_less_the_reply_it_reserves(tmp_path):
    # The flag says 32,768; the upstream holds 16,384 and the request reserves 8,192 for the reply.
    with (
        FakeLLMServer(model=MODEL, context_window=WINDOW, responder=agent_step) as upstream,
        serve(tmp_path, upstream, window=32_768, config=ContextConfig(min_keep_tokens=0)) as server,
    ):
        client = closing(
            openai.OpenAI(
                base_url=f"{server.url}/v1",
                api_key="test",
                default_headers={"X-Conversation-Id": "reserved"},
                max_retries=0,
            )
        )
        history: Any = [{"role": "user", "content": "Find the slowest worker."}]
        for step in range(90):  # 12,600 tokens in small rounds: over the window with the reply's 8,192
            call = {
                "id": f"call_{step}",
                "type": "function",
                "function": {"name": "read_log", "arguments": "{}"},
            }
            history.append({"role": "assistant", "content": None, "tool_calls": [call]})
            history.append({"role": "tool", "tool_call_id": f"call_{step}", "content": log_output(step, 300)})
        reply = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=8_192)
        assert reply.choices[0].message.tool_calls
        sent = [r.body for r in upstream.requests if r.path == "/v1/chat/completions"]
        assert len(sent) == 2  # the overflow, then one retry that fits
        assert upstream.counter(sent[1]) + 8_192 <= WINDOW
