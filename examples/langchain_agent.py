"""A LangChain agent whose model calls contextkeep keeps inside a small context window, offline.

    pip install -e '.[langchain]'
    python examples/langchain_agent.py

The model is a scripted LangChain chat model (no network, no key): it reads a 12 KB log part
with a tool 24 times, then answers, and reports its prompt size as a provider would. The agent's
history keeps every message whole; the model sees contextkeep's view of it: old tool outputs
masked to a short preview with a reference to the offloaded file, old rounds dropped when even
that is too much. The script prints both, call by call, and the last request side by side.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

import contextkeep as ck
from contextkeep._formats import from_openai
from contextkeep._tokens import counter_for_model
from contextkeep.integrations.langchain import ContextKeepMiddleware

READS = 24
WINDOW = 16_000


@tool
def read_log(part: int) -> str:
    """Read one part of the build log (about 12 KB)."""
    return "\n".join(
        f"part {part} line {i:03d}: worker-{i % 5} step {i * 37 % 101} {'ok' if i % 17 else 'RETRY'}"
        for i in range(300)
    )


class ScriptedModel(BaseChatModel):
    """Reads the log part by part, then answers; reports its prompt size like a provider."""

    counter: Any = Field(default_factory=lambda: counter_for_model("deepseek-chat"))
    requests: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """The model itself: its script decides which tool it calls."""
        return self.bind(**kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.requests.append(list(messages))
        n = len(self.requests)
        if n <= READS:
            call = {"name": "read_log", "args": {"part": n}, "id": f"call_{n}"}
            reply = AIMessage(f"Reading part {n}.", tool_calls=[call])
        else:
            reply = AIMessage("Worker 3 keeps retrying step 42: that is why the build fails.")
        prompt = self.counter.count_prompt(from_openai(convert_to_openai_messages(messages)))
        reply.usage_metadata = {"input_tokens": prompt, "output_tokens": 12, "total_tokens": prompt + 12}
        return ChatResult(generations=[ChatGeneration(message=reply)])


def line(m: BaseMessage) -> str:
    """One message on one line: its type, size and start."""
    calls = " ".join(f"{c['name']}({c['args']})" for c in getattr(m, "tool_calls", []))
    text = " ".join(m.text.split()) or calls
    return f"{m.type:>6} {len(m.text):>6,} chars: {text[:64]}"


def size(messages: Sequence[BaseMessage]) -> str:
    """How many messages, and how many characters they hold."""
    return f"{len(messages):>3} messages {sum(len(m.text) for m in messages):>8,} chars"


def main() -> None:
    """Run the agent, then print what the model saw next to the agent's history."""
    with tempfile.TemporaryDirectory() as workspace:
        cm = ck.ContextManager(
            ck.ModelSpec("deepseek-chat", context_window=WINDOW, max_output_tokens=1_000), workspace=workspace
        )
        model = ScriptedModel()
        middleware = ContextKeepMiddleware(cm)
        agent = create_agent(
            model,
            [read_log],
            system_prompt="You are a build engineer. Find why build 4411 fails.",
            middleware=[middleware],
            checkpointer=InMemorySaver(),
        )
        config: Any = {"configurable": {"thread_id": "build-4411"}, "recursion_limit": 200}
        state = agent.invoke({"messages": [HumanMessage("Why does build 4411 fail?")]}, config)
        middleware.close()

        history = state["messages"]
        print(f"call  {'the model saw':<29} the agent's history then")
        for i, request in enumerate(model.requests, 1):
            then = history[: 1 + 2 * (i - 1)]  # the task, then one call and one result per earlier reply
            print(f"{i:>4}  {size(request)}  {size(then)}")
        print(f"\nthe agent's history at the end: {size(history)}, every tool output whole")
        print("the model saw, on its last call (the system prompt, the task, a marker for what it dropped):")
        for m in model.requests[-1]:
            print("  " + line(m))


if __name__ == "__main__":
    main()
