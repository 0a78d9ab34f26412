"""A Google ADK agent kept inside its context window by contextkeep, offline.

    pip install -e '.[adk]'
    python examples/adk_agent.py

The model is an ADK `BaseLlm` subclass (no network, no Google key): it reads 40 "files" of about
20 KB each, one tool call at a time, then answers. `ContextKeepPlugin` changes only what each
request sends; ADK's session keeps every event. Each line compares the two.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models._capabilities import LlmCapabilities
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

import contextkeep as ck
from contextkeep.integrations.adk import ContextKeepPlugin

FILES = 40


def read_file(n: int) -> str:
    """Read source file number `n` of the project.

    Args:
      n: The file's number.
    """
    lines = (f"# module_{n}.py line {i}: cache = Session(window={i * n}).prepare()" for i in range(330))
    return "\n".join(lines)


def size(contents: list[types.Content]) -> str:
    """Contents and their size, as serialised."""
    data = json.dumps([c.model_dump(mode="json", exclude_none=True) for c in contents])
    return f"{len(contents):3d} contents ({len(data) / 1024:6.0f} KB)"


class FileReader(BaseLlm):
    """A scripted model: one `read_file` call per turn, then an answer; it reports usage."""

    calls: int = 0

    @property
    def capabilities(self) -> LlmCapabilities:
        """No output schema together with tools."""
        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Answer one request (ADK's non-streaming contract: exactly one response)."""
        self.calls += 1
        print(f"call {self.calls:2d}: the model saw {size(llm_request.contents)}", end="")
        if self.calls <= FILES:
            part = types.Part(function_call=types.FunctionCall(name="read_file", args={"n": self.calls}))
        else:
            part = types.Part(text="The cache is prepared in every module.")
        prompt = len(json.dumps([c.model_dump(mode="json") for c in llm_request.contents])) // 4
        usage = types.GenerateContentResponseUsageMetadata(  # what a provider would report
            prompt_token_count=prompt, candidates_token_count=20, total_token_count=prompt + 20
        )
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)


async def main(folder: Path) -> None:
    """Run the agent with the plugin, printing what the model saw against ADK's session."""
    # A 16k-token model; "heuristic" counts offline. A real tokenizer: tokenizer="hf:path/to/tokenizer.json".
    cm = ck.ContextManager(
        ck.ModelSpec("deepseek-chat", context_window=16_384, max_output_tokens=2_048),
        store=f"sqlite:///{folder / 'agent.db'}",
        workspace=folder / "workspace",
        tokenizer="heuristic",
    )
    agent = LlmAgent(
        name="reader",
        model=FileReader(model="file-reader"),
        instruction="Read every file with read_file, then say where the cache is prepared.",
        tools=[read_file],
    )
    sessions = InMemorySessionService()
    app = App(name="example", root_agent=agent, plugins=[ContextKeepPlugin(cm)])
    runner = Runner(app=app, session_service=sessions)
    session = await sessions.create_session(app_name="example", user_id="me", session_id="example-1")
    message = types.Content(role="user", parts=[types.Part(text=f"Read the {FILES} files.")])
    async for event in runner.run_async(user_id="me", session_id=session.id, new_message=message):
        if event.get_function_calls() or event.is_final_response():  # a reply of the model
            stored = await sessions.get_session(app_name="example", user_id="me", session_id=session.id)
            assert stored is not None
            print(f" | ADK's session holds {size([e.content for e in stored.events if e.content])}")
    async with cm.session("example-1") as s:
        view = await s.current_view()
        print(f"\ncontextkeep's transcript: {len(s.transcript)} messages; the next view: {len(view.neutral)}")
        layers = ", ".join(sorted({r.layer for r in s.state.records})) or "none"
        status = view.status
        print(f"  {status.used:,} of {status.budget:,} tokens ({status.state}); layers run: {layers}")
    await cm.close()


if __name__ == "__main__":
    os.environ.setdefault("ADK_DISABLE_LOAD_DOTENV", "1")  # nothing here needs Google
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))
