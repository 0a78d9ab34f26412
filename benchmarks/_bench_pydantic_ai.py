"""pydantic-ai's part of `bench_integrations`: the time `ContextKeepCapability` adds per model call.

An agent on `FunctionModel` continues a conversation of N messages (tool rounds with ~2 KB
outputs) for `CALLS` more tool calls and an answer. The same agent with a no-op capability
(the same hooks, returning what they get) is the baseline: added time per call = the median
difference of `REPEAT` interleaved pairs of runs (`_bench_workload.added_ms`); every run is on a
fresh conversation fed the N messages first (that first call syncs and counts every message once, and
loads the tokenizer for the new session: `first_call_ms`).
The window (131,072) holds 300 messages (about 61,000 tokens) with room to spare, so no compaction
runs: this is the steady per-call cost.

    TIKTOKEN_CACHE_DIR=../shared/tokenizers .venv/bin/python benchmarks/_bench_pydantic_ai.py
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from _bench_workload import CALLS, STORES, Pair, measured_rows, settled, tool_output
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext
from pydantic_ai.usage import RequestUsage, UsageLimits

from contextkeep import ContextManager
from contextkeep.integrations.pydantic_ai import ContextKeepCapability

LIMITS = UsageLimits(request_limit=1_000)


class NoOp(AbstractCapability[Any]):
    """The baseline: the hooks contextkeep uses, doing nothing."""

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """The request as it is."""
        return request_context

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        """The response as it is."""
        return response


def history(messages: int) -> list[ModelMessage]:
    """A conversation of about `messages` messages: a prompt, then tool rounds."""
    out: list[ModelMessage] = [
        ModelRequest([SystemPromptPart("Work carefully."), UserPromptPart("Fix the cache.")])
    ]
    n = 0
    while len(out) < messages:
        n += 1
        call = ToolCallPart("read_file", {"path": f"src/m{n}.py"}, f"call_{n}")
        out.append(
            ModelResponse(
                [TextPart(f"Reading {n}."), call], usage=RequestUsage(input_tokens=1, output_tokens=1)
            )
        )
        out.append(ModelRequest([ToolReturnPart("read_file", tool_output(n), f"call_{n}")]))
    return out


def agent(capability: AbstractCapability[Any], calls: int) -> Agent[None, str]:
    """An agent whose model makes `calls` tool calls, then answers."""
    made = [0]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        made[0] += 1
        usage = RequestUsage(input_tokens=1_000, output_tokens=10)
        if made[0] <= calls:
            return ModelResponse([ToolCallPart("read_file", {"path": f"src/x{made[0]}.py"})], usage=usage)
        return ModelResponse([TextPart("Done.")], usage=usage)

    a = Agent(FunctionModel(model), instructions="You are a coding agent.", capabilities=[capability])

    @a.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        return tool_output(len(path))

    return a


async def _timed(capability: AbstractCapability[Any], start: list[ModelMessage]) -> tuple[float, float]:
    """(seconds of the first call, which feeds `start`; seconds per call of `CALLS` tool calls after it)."""
    t0 = time.perf_counter()
    fed = await agent(capability, 0).run("Go on.", message_history=start, usage_limits=LIMITS)
    first = time.perf_counter() - t0
    with settled():
        t1 = time.perf_counter()
        await agent(capability, CALLS).run("Go on.", message_history=fed.all_messages(), usage_limits=LIMITS)
        return first, (time.perf_counter() - t1) / (CALLS + 1)


async def _pair(cm: ContextManager, messages: int, conversation: str) -> Pair:
    start = history(messages)
    _, without = await _timed(NoOp(), start)
    fed, per_call = await _timed(ContextKeepCapability(cm, conversation_id=conversation), start)
    return Pair(len(start), without, per_call, fed)


async def run(sizes: list[int]) -> list[dict[str, Any]]:
    """One row per store and history size."""
    return await measured_rows("pydantic-ai", sizes, STORES, _pair)


if __name__ == "__main__":
    sizes = [int(s) for s in sys.argv[1:]] or [20, 100, 300]
    for row in asyncio.run(run(sizes)):
        print(row)
