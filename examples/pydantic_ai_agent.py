"""A pydantic-ai agent kept inside its context window by contextkeep, offline.

    pip install -e '.[pydantic-ai]'
    python examples/pydantic_ai_agent.py

The model is pydantic-ai's `FunctionModel` (no network, no key): it reads 40 "files" of about
20 KB each, one tool call at a time, then answers. `ContextKeepCapability` changes only what each
request sends; the run's own history keeps every message. Each line compares the two.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

import contextkeep as ck
from contextkeep.integrations.pydantic_ai import ContextKeepCapability

FILES = 40


def read(n: int) -> str:
    """About 20 KB of a made-up source file."""
    return "\n".join(
        f"# module_{n}.py line {i}: cache = Session(window={i * n}).prepare()" for i in range(330)
    )


def describe(view: ck.View) -> str:
    """Tokens, state and ratio of a view, and the layers that compacted it."""
    status = view.status
    state = status.state.value if status.state is not None else "unknown"
    layers = f", compacted by {'+'.join(view.compacted)}" if view.compacted else ""
    return f"{view.tokens:6,d} tokens, {state} {status.ratio or 0:.2f}{layers}"


async def main(folder: Path) -> None:
    """Run the agent on a store and workspace in `folder`, printing each request beside the history."""
    # A 16k-token model; "heuristic" counts offline. A real tokenizer: tokenizer="hf:path/to/tokenizer.json".
    cm = ck.ContextManager(
        ck.ModelSpec("deepseek-chat", context_window=16_384, max_output_tokens=2_048),
        store=f"sqlite:///{folder / 'agent.db'}",
        workspace=folder / "workspace",
        tokenizer="heuristic",
    )
    capability = ContextKeepCapability(cm, conversation_id="example-1")
    seen: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        view = capability.last_view
        assert view is not None
        step = len(seen) + 1
        # Each call so far added a response and a request with its tool's output.
        print(
            f"call {step:2d}: the model saw {len(messages):3d} messages ({describe(view)}); "
            f"the run's history holds {2 * step - 1:3d}"
        )
        seen.append(len(messages))
        usage = RequestUsage(input_tokens=view.tokens, output_tokens=20)  # what a provider would report
        if step <= FILES:
            return ModelResponse(parts=[ToolCallPart("read_file", {"n": step})], usage=usage)
        return ModelResponse(parts=[TextPart("The cache is prepared in every module.")], usage=usage)

    agent = Agent(
        FunctionModel(model), instructions="Read every module, then answer.", capabilities=[capability]
    )

    @agent.tool_plain
    def read_file(n: int) -> str:
        """Read module `n`."""
        return read(n)

    result = await agent.run("Where is the cache prepared?", usage_limits=UsageLimits(request_limit=100))
    session = await capability.session()
    chars = sum(len(read(n)) for n in range(1, FILES + 1))
    offloaded = sum(1 for f in (folder / "workspace").rglob("*") if f.is_file())
    print(f"\nanswer: {result.output}")
    history = len(result.all_messages())
    print(f"the run's history holds {history} messages ({chars:,} characters of tool output, whole)")
    print(f"the model saw at most {max(seen)}; contextkeep's transcript holds {len(session.transcript)}")
    print(
        f"usage baseline: {session.usage.status.value}; {offloaded} files offloaded (the agent can read them)"
    )
    await cm.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))
