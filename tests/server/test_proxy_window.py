"""The proxy budgets for the upstream's real window: its model list first, then what its overflow errors state."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import pytest

from contextkeep._capabilities import CapacitySource
from contextkeep._config import ContextConfig
from contextkeep._manager import ContextManager
from contextkeep.testing import FakeLLMServer
from support import SSECollector, types
from support.proxy_fixtures import chat_calls, openai_client
from support.proxy_loop import MODEL, TOOLS, WINDOW, agent_step, log_output, run_agent, serve

# The first overflow comes at about call 8; the calls after it show the corrected window holds.
CORRECTED_CALLS = int(os.environ.get("CONTEXTKEEP_CORRECTED_CALLS", "20"))


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
            run_agent(server, "corrected", CORRECTED_CALLS)
            events = stream.wait_for(lambda ev: "context.capacity.corrected" in types(ev))
        assert chat_calls(upstream) - CORRECTED_CALLS <= 2
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
        client = openai_client(server, "reserved")
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
