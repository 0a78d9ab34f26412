"""The OpenAI Agents SDK's part of `bench_integrations`: the time `ContextKeepModel` adds per model call.

An agent continues a conversation of N messages (tool rounds with ~2 KB outputs, as Responses
input items) for `CALLS` more tool calls and an answer, through `agents.Runner`. The same agent
on the unwrapped model is the baseline: added time per call = the median difference of `REPEAT`
interleaved pairs of runs (`_bench_workload.added_ms`), each on a fresh conversation that was
fed the N messages first (that first sync counts every message once: `first_call_ms`). The
window (131,072) holds 300 messages, so no compaction runs: this is the steady per-call cost.

    TIKTOKEN_CACHE_DIR=../shared/tokenizers .venv/bin/python benchmarks/_bench_openai_agents.py
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from _bench_workload import CALLS, STORES, Pair, measured_rows, settled, tool_output
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from agents.usage import Usage

from contextkeep import ContextManager
from contextkeep.integrations.openai_agents import ContextKeepModel


@function_tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: The file's path.
    """
    return tool_output(len(path))


def history(messages: int) -> list[TResponseInputItem]:
    """A conversation of about `messages` messages: a prompt, then tool rounds."""
    out: list[Any] = [{"role": "user", "content": "Fix the cache."}]
    n = 0
    while len(out) < messages:
        n += 1
        out.append(
            {
                "type": "function_call",
                "call_id": f"c{n}",
                "name": "read_file",
                "arguments": f'{{"path":"m{n}"}}',
            }
        )
        out.append({"type": "function_call_output", "call_id": f"c{n}", "output": tool_output(n)})
    return out


class Scripted(Model):
    """A model that makes `calls` tool calls, then answers (the lightest `Model` the runner accepts)."""

    def __init__(self, calls: int) -> None:
        self.calls, self.made = calls, 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        """The next scripted response."""
        self.made += 1
        usage = Usage(requests=1, input_tokens=1_000, output_tokens=10, total_tokens=1_010)
        if self.made <= self.calls:
            call = function_call("read_file", {"path": f"src/x{self.made}.py"}, call_id=f"x{self.made}")
            return ModelResponse(output=[call], usage=usage, response_id=None)
        return ModelResponse(output=[assistant_message("Done.")], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        """Not used here."""
        raise NotImplementedError


async def _timed(wrap: Any, start: list[TResponseInputItem]) -> tuple[float, float]:
    """(seconds of the first call, which feeds `start`; seconds per call of `CALLS` tool calls after it)."""
    t0 = time.perf_counter()
    fed = await Runner.run(_agent(wrap(Scripted(0))), [*start, {"role": "user", "content": "Go on."}])
    first = time.perf_counter() - t0
    with settled():
        t1 = time.perf_counter()
        go_on: list[Any] = [*fed.to_input_list(), {"role": "user", "content": "Go on."}]
        await Runner.run(_agent(wrap(Scripted(CALLS))), go_on, max_turns=CALLS + 5)
        return first, (time.perf_counter() - t1) / (CALLS + 1)


def _around(wrapper: ContextKeepModel, model: Model) -> Model:
    """The conversation's one wrapper, around the model of this run."""
    wrapper.model = model
    return wrapper


def _agent(model: Model) -> Agent[Any]:
    return Agent(name="coder", instructions="You are a coding agent.", model=model, tools=[read_file])


async def _pair(cm: ContextManager, messages: int, conversation: str) -> Pair:
    start = history(messages)
    _, without = await _timed(lambda model: model, start)
    wrapper = ContextKeepModel(Scripted(0), cm, conversation_id=conversation)
    fed, per_call = await _timed(functools.partial(_around, wrapper), start)
    return Pair(len(start), without, per_call, fed)


async def run(sizes: list[int]) -> list[dict[str, Any]]:
    """One row per store and history size."""
    set_tracing_disabled(True)
    return await measured_rows("openai-agents", sizes, STORES, _pair)


if __name__ == "__main__":
    sizes = [int(s) for s in sys.argv[1:]] or [20, 100, 300]
    for row in asyncio.run(run(sizes)):
        print(row)
