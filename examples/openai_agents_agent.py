"""An OpenAI Agents SDK agent kept inside its context window by contextkeep, offline.

    pip install -e '.[openai-agents]'
    python examples/openai_agents_agent.py

The model is the SDK's own test model, `agents.testing.ScriptedModel` (no network, no key): it
reads 40 "files" of about 20 KB each, one tool call at a time, then answers. `ContextKeepModel`
wraps it, as it would wrap `OpenAIResponsesModel` or `OpenAIChatCompletionsModel`, and changes
only what each request sends; the run's own history keeps every item. Each line compares the two.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage

import contextkeep as ck
from contextkeep._events import ContextStatus
from contextkeep.integrations.openai_agents import ContextKeepModel

FILES = 40


@function_tool
def read_file(n: int) -> str:
    """Read module `n` of the project.

    Args:
        n: The module's number.
    """
    return "\n".join(
        f"# module_{n}.py line {i}: cache = Session(window={i * n}).prepare()" for i in range(330)
    )


def describe(status: ContextStatus) -> str:
    """Tokens, state and ratio of the last view, and the layer that compacted it."""
    state = status.state.value if status.state is not None else "unknown"
    layer = f", after {status.compact_layer}" if status.compact_layer else ""
    return f"{status.used:6,d} tokens, {state} {status.ratio or 0:.2f}{layer}"


async def main(folder: Path) -> None:
    """Run the agent on a store and workspace in `folder`, printing each request beside the history."""
    set_tracing_disabled(True)  # no network: the SDK would export traces to OpenAI
    # A 16k-token model; "heuristic" counts offline. A real tokenizer: tokenizer="hf:path/to/tokenizer.json".
    cm = ck.ContextManager(
        ck.ModelSpec("deepseek-chat", context_window=16_384, max_output_tokens=2_048),
        store=f"sqlite:///{folder / 'agent.db'}",
        workspace=folder / "workspace",
        tokenizer="heuristic",
    )
    statuses: list[Any] = []  # each `context.status` event: how full the view is
    cm.events.subscribe(statuses.append, ContextStatus.type)
    seen: list[int] = []

    def respond(call: ModelCall) -> ModelStep:
        step = len(seen) + 1
        items = list(call.input)
        # Each call so far added a function call and its output to the run's history.
        print(
            f"call {step:2d}: the model saw {len(items):3d} items ({describe(statuses[-1])}); "
            f"the run's history holds {2 * step - 1:3d}"
        )
        seen.append(len(items))
        size = len(json.dumps(items)) // 4  # what a provider would report, roughly
        usage = Usage(requests=1, input_tokens=size, output_tokens=20, total_tokens=size + 20)
        if step <= FILES:
            return ModelStep(
                output=[function_call("read_file", {"n": step}, call_id=f"call_{step}")], usage=usage
            )
        return ModelStep(output=[assistant_message("The cache is prepared in every module.")], usage=usage)

    scripted = ScriptedModel([ModelStep.respond(respond) for _ in range(FILES + 1)])
    model = ContextKeepModel(scripted, cm, conversation_id="example-1")
    agent = Agent(
        name="reader", instructions="Read every module, then answer.", model=model, tools=[read_file]
    )

    result = await Runner.run(agent, "Where is the cache prepared?", max_turns=100)
    history: list[Any] = result.to_input_list()
    chars = sum(len(item["output"]) for item in history if item.get("type") == "function_call_output")
    offloaded = sum(1 for f in (folder / "workspace").rglob("*") if f.is_file())
    print(f"\nanswer: {result.final_output}")
    print(f"the run's history holds {len(history)} items ({chars:,} characters of tool output, whole)")
    print(
        f"the model saw at most {max(seen)}; contextkeep's transcript holds {len(model.session.transcript)}"
    )
    baseline = model.session.usage.status.value
    print(f"usage baseline: {baseline}; {offloaded} files offloaded (the agent can read them)")
    await cm.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))
