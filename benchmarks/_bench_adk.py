"""Google ADK's part of `bench_integrations`: the time `ContextKeepPlugin` adds per model call.

A real `LlmAgent`, run by an ADK `Runner` on a scripted `BaseLlm`, continues a session of N
messages (tool rounds with ~2 KB outputs, stored as ADK events) for `CALLS` more tool calls and
an answer. The same agent with a no-op plugin (the same callbacks, doing nothing) is the
baseline: added time per call = the median difference of `REPEAT` interleaved pairs of runs
(`_bench_workload.added_ms`); every run is on a fresh ADK session holding the N messages. Its
first call, a turn of its own, syncs and counts every message once and loads the session (`first_call_ms`);
`plugin_ms_per_call` is the time spent inside the plugin's callbacks in the measured turn.
The window (131,072) holds 300 messages, so no compaction runs: this is the steady per-call cost.

    TIKTOKEN_CACHE_DIR=../shared/tokenizers .venv/bin/python benchmarks/_bench_adk.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncGenerator
from typing import Any

from _bench_workload import CALLS, STORES, Pair, measured_rows, settled, tool_output
from google.adk.agents import LlmAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.apps import App
from google.adk.events import Event
from google.adk.models._capabilities import LlmCapabilities
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from contextkeep import ContextManager
from contextkeep.integrations.adk import ContextKeepPlugin

APP, USER, AGENT = "bench", "bench-user", "coder"


class NoOp(BasePlugin):
    """The baseline: the callbacks contextkeep uses, doing nothing."""

    def __init__(self) -> None:
        super().__init__(name="noop")

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """The request as it is."""
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """The response as it is."""
        return None


class Timed(ContextKeepPlugin):
    """`ContextKeepPlugin`, adding up the time spent in its model callbacks."""

    spent = 0.0

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Prepare the view, timed."""
        t0 = time.perf_counter()
        out = await super().before_model_callback(callback_context=callback_context, llm_request=llm_request)
        self.spent += time.perf_counter() - t0
        return out

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """Record the reply, timed."""
        t0 = time.perf_counter()
        out = await super().after_model_callback(callback_context=callback_context, llm_response=llm_response)
        self.spent += time.perf_counter() - t0
        return out


def read_file(path: str) -> str:
    """Read a file.

    Args:
      path: The file's path.
    """
    return tool_output(len(path))


class Coder(BaseLlm):
    """Each user message: `calls` tool calls, one per turn, then an answer."""

    calls: int = 0
    made: int = 0

    @property
    def capabilities(self) -> LlmCapabilities:
        """No output schema together with tools."""
        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """One reply, with the usage a provider would report."""
        self.made += 1
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1_000, candidates_token_count=10, total_token_count=1_010
        )
        if self.made <= self.calls:
            call = types.FunctionCall(name="read_file", args={"path": f"src/x{self.made}.py"})
            part = types.Part(function_call=call)
        else:
            part = types.Part(text="Done.")
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)


async def _session(sessions: InMemorySessionService, session_id: str, messages: int) -> None:
    """An ADK session of about `messages` messages: a prompt, then tool rounds."""
    session = await sessions.create_session(app_name=APP, user_id=USER, session_id=session_id)

    async def add(author: str, role: str, part: types.Part) -> None:
        content = types.Content(role=role, parts=[part])
        await sessions.append_event(session, Event(invocation_id="history", author=author, content=content))

    await add("user", "user", types.Part(text="Fix the cache."))
    for n in range(1, (messages - 1) // 2 + 1):
        call = types.FunctionCall(id=f"adk-{n}", name="read_file", args={"path": f"src/m{n}.py"})
        await add(AGENT, "model", types.Part(function_call=call))
        result = types.FunctionResponse(id=f"adk-{n}", name="read_file", response={"result": tool_output(n)})
        await add(AGENT, "user", types.Part(function_response=result))


async def _timed(plugin: BasePlugin, messages: int, session_id: str) -> tuple[float, float]:
    """(seconds of the first call, which syncs the session; seconds per call of `CALLS` more tool calls)."""
    model = Coder(model="coder")
    agent = LlmAgent(name=AGENT, model=model, instruction="You are a coding agent.", tools=[read_file])
    sessions = InMemorySessionService()
    runner = Runner(app=App(name=APP, root_agent=agent, plugins=[plugin]), session_service=sessions)
    await _session(sessions, session_id, messages)

    async def turn() -> None:
        message = types.Content(role="user", parts=[types.Part(text="Go on.")])
        async for _ in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
            pass

    t0 = time.perf_counter()
    await turn()
    first = time.perf_counter() - t0
    model.calls, model.made = CALLS, 0
    if isinstance(plugin, Timed):
        plugin.spent = 0.0
    with settled():
        t1 = time.perf_counter()
        await turn()
        return first, (time.perf_counter() - t1) / (CALLS + 1)


async def _pair(cm: ContextManager, messages: int, conversation: str) -> Pair:
    _, without = await _timed(NoOp(), messages, f"noop-{conversation}")
    plugin = Timed(cm)
    fed, per_call = await _timed(plugin, messages, conversation)
    return Pair(messages, without, per_call, fed, plugin.spent / (CALLS + 1))


async def run(sizes: list[int]) -> list[dict[str, Any]]:
    """One row per store and history size."""
    os.environ.setdefault("ADK_DISABLE_LOAD_DOTENV", "1")
    return await measured_rows("google-adk", sizes, STORES, _pair, inside="plugin_ms_per_call")


if __name__ == "__main__":
    sizes = [int(s) for s in sys.argv[1:]] or [20, 100, 300]
    for row in asyncio.run(run(sizes)):
        print(row)
