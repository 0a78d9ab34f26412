"""LangChain part of `bench_integrations.py`: the time `ContextKeepMiddleware` adds per model call.

The same `create_agent` agent runs with a no-op middleware and with `ContextKeepMiddleware`, on an
instant scripted chat model, from a history of N messages (the task, then rounds of one tool call
and its ~2 KB result). Each timed run continues that history for 10 tool calls and a final answer
(11 model calls, N to N + 22 messages), after an untimed run that opened the conversation (the
first call of a thread loads its transcript once per process). Two clocks: the whole agent step
(`added_ms_per_call` is the difference of the two agents'), and the middleware alone, between a
clock middleware outside it and one inside it (`inside_ms_per_call`, handler excluded). The window
(131,072) keeps the view below the warning ratio, so no compaction runs: the figure is the steady
per-call cost (sync, count, view, record). The rest of each call is LangGraph's own step (the
no-op column). The tokenizer is DeepSeek's exact `tokenizer.json`; each figure is the median of
`REPEAT` interleaved pairs of runs (`_bench_workload.added_ms`).

    TIKTOKEN_CACHE_DIR=../shared/tokenizers .venv/bin/python benchmarks/_bench_langchain.py [20,100,300]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from _bench_workload import DEEPSEEK_TOKENIZER, REPEAT, SPEC, STORES, added_ms, ms, settled, tool_output
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

import contextkeep as ck
from contextkeep._tokens import HFEncoder
from contextkeep.integrations.langchain import ContextKeepMiddleware

TOOL_CALLS = 10
"""Timed runs per configuration; the best is reported (the machine's noise only adds)."""


@tool
def read_log(part: int) -> str:
    """Read one part of the build log."""
    return tool_output(part)


class _Instant(BaseChatModel):
    """Calls `read_log` `TOOL_CALLS` times, then answers; no latency of its own."""

    step: int = 0

    @property
    def _llm_type(self) -> str:
        return "instant"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
    ) -> ChatResult:
        self.step += 1
        if self.step % (TOOL_CALLS + 1):
            reply = AIMessage(
                "", tool_calls=[{"name": "read_log", "args": {"part": self.step}, "id": f"c{self.step}"}]
            )
        else:
            reply = AIMessage("done")
        reply.usage_metadata = {"input_tokens": 1_000, "output_tokens": 10, "total_tokens": 1_010}
        return ChatResult(generations=[ChatGeneration(message=reply)])


class _NoOp(AgentMiddleware):
    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


class _Clock(AgentMiddleware):
    """Times each model call as it passes (outside the middleware measured, or inside it)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name
        self.seconds: list[float] = []

    @property
    def name(self) -> str:
        return self._name

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        start = time.perf_counter()
        try:
            return await handler(request)
        finally:
            self.seconds.append(time.perf_counter() - start)


def _seed(messages: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [HumanMessage("Find why build 4411 fails.")]
    for i in range((messages - 1) // 2):
        call = {"name": "read_log", "args": {"part": -i}, "id": f"seed{i}"}
        out += [
            AIMessage("", tool_calls=[call]),
            ToolMessage(tool_output(-i), tool_call_id=f"seed{i}", name="read_log"),
        ]
    return out


async def _per_call(middleware: AgentMiddleware, seed: list[BaseMessage], thread: str) -> tuple[float, float]:
    """Seconds per model call of one timed run (the whole agent step, and inside `middleware` alone),
    after the untimed run that opens the conversation."""
    outer, inner = _Clock("outer"), _Clock("inner")
    agent = create_agent(
        _Instant(),
        [read_log],
        system_prompt="You are a build engineer.",
        middleware=[outer, middleware, inner],
    )
    config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 100}
    state: Any = await agent.ainvoke(cast(Any, {"messages": seed}), config)
    run = {"messages": [*state["messages"], HumanMessage("Go on.")]}
    outer.seconds.clear()
    inner.seconds.clear()
    with settled():
        start = time.perf_counter()
        await agent.ainvoke(cast(Any, run), config)
        step = (time.perf_counter() - start) / (TOOL_CALLS + 1)
    return step, statistics.median(o - i for o, i in zip(outer.seconds, inner.seconds, strict=True))


async def run(sizes: list[int]) -> list[dict[str, Any]]:
    """One row per history size and store: milliseconds per model call, and what contextkeep adds."""
    encoder = HFEncoder(DEEPSEEK_TOKENIZER)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        for store in STORES:
            url = "memory://" if store == "memory" else f"sqlite:///{folder}/bench.db"
            cm = ck.ContextManager(
                SPEC,
                store=url,
                workspace=Path(folder) / "ws",
                tokenizer=encoder,
            )
            middleware = ContextKeepMiddleware(cm)
            for n in sizes:
                seed = _seed(n)
                noop, kept = [], []
                for r in range(REPEAT):  # interleaved, so both see the same machine load
                    noop.append(await _per_call(_NoOp(), seed, f"noop-{store}-{n}-{r}"))
                    kept.append(await _per_call(middleware, seed, f"ck-{store}-{n}-{r}"))
                steps = [s for s, _ in kept], [s for s, _ in noop]
                rows.append(
                    {
                        "framework": "langchain",
                        "messages": n,
                        "store": store,
                        "added_ms_per_call": added_ms(*steps),
                        "inside_ms_per_call": added_ms([i for _, i in kept], [i for _, i in noop]),
                        "noop_ms_per_call": ms(steps[1]),
                        "contextkeep_ms_per_call": ms(steps[0]),
                    }
                )
            await cm.close()
    return rows


if __name__ == "__main__":
    sizes = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [20, 100, 300]
    for row in asyncio.run(run(sizes)):
        print(row)
