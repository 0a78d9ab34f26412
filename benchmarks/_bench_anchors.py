"""The comparison libraries, each driven as a `Subject` with a stub model that answers instantly.

- AgentScope 2.0: `Agent.compress_context` (counts the whole prompt, then summarises if over).
- LangChain 1.x: `SummarizationMiddleware.before_model`, and `trim_messages` to the window.
- pydantic-ai-harness: `SummarizingCompaction.before_model_request`.
Each is imported only when it is driven: a library that is not installed is skipped by the caller.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Sequence
from typing import Any

from _bench_subject import CLOCK, HUGE_WINDOW, STUB_SUMMARY, Subject

from contextkeep._messages import Message
from contextkeep.replay.trajectories import Trajectory


def _recorded_usage(trajectory: Trajectory) -> dict[int, dict[str, Any]]:
    return {c.index: dict(c.usage) for c in trajectory.calls if c.usage}


class AgentScope(Subject):
    """AgentScope 2.0: `Agent.compress_context` (counts the whole prompt, then summarises if over)."""

    def __init__(self, trajectory: Trajectory) -> None:
        super().__init__(trajectory)
        import agentscope
        from agentscope import message as m
        from agentscope.agent import Agent
        from agentscope.model import ChatModelBase, ChatResponse
        from agentscope.tool import FunctionTool, Toolkit

        self.name, self.counter = f"agentscope {agentscope.__version__}", "bytes/4 (ChatModelBase default)"
        self._m, self._agent_cls, self._toolkit_cls, self._tool_cls = m, Agent, Toolkit, FunctionTool
        summary = json.dumps(dict.fromkeys(_agentscope_summary_fields(), STUB_SUMMARY))

        class StubModel(ChatModelBase):  # type: ignore[misc]  # AgentScope is optional and untyped here
            """Answers every call instantly with the structured summary, never touching the network."""

            async def _call_api(self, model_name: str, messages: list[Any], **kwargs: Any) -> Any:
                with CLOCK.inside():
                    call = m.ToolCallBlock(id="stub", name="generate_structured_output", input=summary)
                    return ChatResponse(content=[call], is_last=True)

        self._model_cls = StubModel
        self.agent: Any = None

    async def open(self, window: int) -> None:
        from agentscope.credential import CredentialBase

        system = next((x.text for x in self.trajectory.messages if x.role == "system"), "")
        model = self._model_cls(CredentialBase(), "stub", None, stream=False, context_size=window)
        toolkit = self._toolkit_cls()
        if self.trajectory.tools:
            fn = self.trajectory.tools[0]["function"]

            def bash(command: str) -> str:
                """Execute a bash command."""
                return command

            await toolkit.add_tool(self._tool_cls(bash, name=fn["name"], input_schema=fn["parameters"]))
        self.agent = self._agent_cls(name="agent", system_prompt=system, model=model, toolkit=toolkit)

    async def extend(self, messages: Sequence[Message]) -> None:
        m, context = self._m, self.agent.state.context
        for x in messages:
            if x.role == "user":
                context.append(m.UserMsg("user", x.text))
            elif x.role == "assistant":
                blocks: list[Any] = [m.TextBlock(text=x.text)] if x.text else []
                blocks += [
                    m.ToolCallBlock(id=c.id, name=c.name, input=c.arguments, state=m.ToolCallState.FINISHED)
                    for c in x.tool_calls
                ]
                context.append(m.AssistantMsg("agent", blocks))
            elif x.role == "tool":  # AgentScope appends a tool result to the assistant message that called it
                name = next(
                    (b.name for b in context[-1].content if getattr(b, "id", None) == x.tool_call_id), "bash"
                )
                context[-1].content.append(
                    m.ToolResultBlock(
                        id=x.tool_call_id or "", name=name, output=x.text, state=m.ToolResultState.SUCCESS
                    )
                )

    async def tokens(self) -> int:
        kwargs = await self.agent._prepare_model_input()
        return int(await self.agent.model.count_tokens(**kwargs))

    def check(self) -> Awaitable[Any]:
        pending: Awaitable[Any] = self.agent.compress_context()
        return pending

    async def resize(self, window: int) -> None:
        self.agent.model.context_size = window

    compact = check

    async def describe(self, result: Any) -> str:
        return f"summary, {len(self.agent.state.context)} msgs / {await self.tokens()} tok"


def _agentscope_summary_fields() -> list[str]:
    from agentscope.agent import ContextConfig

    return list(ContextConfig().summary_schema["properties"])


class LangChain(Subject):
    """LangChain 1.x: `SummarizationMiddleware.before_model` (counts the messages, then summarises)."""

    def __init__(self, trajectory: Trajectory, **options: Any) -> None:
        super().__init__(trajectory)
        import langchain
        from langchain.agents.middleware import SummarizationMiddleware
        from langchain_core.language_models import BaseChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult

        self.name, self.counter = f"langchain {langchain.__version__}", "count_tokens_approximately (default)"
        if options:
            self.name += " (" + ",".join(f"{k.split('_')[0]}={v}" for k, v in options.items()) + ")"
        self._options = {"trigger": ("fraction", 0.8), **options}
        self._middleware_cls = SummarizationMiddleware
        self._usage = _recorded_usage(trajectory)

        class StubChatModel(BaseChatModel):
            """Answers every call instantly, never touching the network."""

            @property
            def _llm_type(self) -> str:
                return "stub-chat"

            def _generate(
                self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any
            ) -> Any:
                with CLOCK.inside():
                    return ChatResult(generations=[ChatGeneration(message=AIMessage(STUB_SUMMARY))])

        self._model_cls = StubChatModel
        self.messages: list[Any] = []
        self.middleware: Any = None
        self._seen = 0

    async def open(self, window: int) -> None:
        self.messages, self._seen = [], 0
        await self.resize(window)

    async def extend(self, messages: Sequence[Message]) -> None:
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

        for x in messages:
            index, self._seen = self._seen, self._seen + 1
            if x.role == "user":
                self.messages.append(HumanMessage(x.text))
            elif x.role == "assistant":
                calls = [{"name": c.name, "args": json.loads(c.arguments), "id": c.id} for c in x.tool_calls]
                usage = self._usage.get(index)
                meta = (
                    {
                        "input_tokens": usage.get("prompt_tokens", 0),
                        "output_tokens": usage.get("completion_tokens", 0),
                        "total_tokens": usage.get("total_tokens", 0),
                    }
                    if usage
                    else None
                )
                self.messages.append(AIMessage(x.text, tool_calls=calls, usage_metadata=meta))
            elif x.role == "tool":
                self.messages.append(ToolMessage(x.text, tool_call_id=x.tool_call_id or ""))
            # the system prompt is not part of a LangChain agent's state messages

    async def tokens(self) -> int:
        return int(self.middleware.token_counter(self.messages))

    def check(self) -> Any:
        return self.middleware.before_model({"messages": self.messages}, None)

    async def resize(self, window: int) -> None:
        self.middleware = self._middleware_cls(
            self._model_cls(profile={"max_input_tokens": window}), **self._options
        )

    compact = check

    async def describe(self, result: Any) -> str:
        if result is None:
            return "no pass"
        kept = result["messages"][1:]  # after RemoveMessage(REMOVE_ALL_MESSAGES)
        summary = kept[0].content
        how = "summary" if summary.endswith(STUB_SUMMARY) else f"no LLM call: {summary.splitlines()[-1]!r}"
        return f"{how}, {len(kept)} msgs / {self.middleware.token_counter(kept)} tok"


class TrimMessages(LangChain):
    """LangChain `trim_messages` to the window, the other per-call step LangChain users take."""

    def check(self) -> Any:
        from langchain_core.messages import trim_messages
        from langchain_core.messages.utils import count_tokens_approximately

        return trim_messages(
            self.messages, max_tokens=HUGE_WINDOW, token_counter=count_tokens_approximately, strategy="last"
        )


class Harness(Subject):
    """pydantic-ai-harness: `SummarizingCompaction.before_model_request` under its trigger."""

    def __init__(self, trajectory: Trajectory) -> None:
        super().__init__(trajectory)
        from importlib.metadata import version

        self.name = f"pydantic-ai-harness {version('pydantic-ai-harness')}"
        self.counter = "last usage + chars/4 (default)"
        self._usage = _recorded_usage(trajectory)
        self.history: list[Any] = []
        self._seen = 0

    async def open(self, window: int) -> None:
        from pydantic_ai.models import ModelRequestContext, ModelRequestParameters
        from pydantic_ai.models.test import TestModel
        from pydantic_ai.tools import RunContext
        from pydantic_ai.usage import RunUsage
        from pydantic_ai_harness import SummarizingCompaction

        self.history, self._seen = [], 0
        model = TestModel()
        self._capability = SummarizingCompaction(model=model, max_tokens=window)
        self._ctx = RunContext(deps=None, model=model, usage=RunUsage(), messages=self.history)
        self._request = ModelRequestContext(
            model=model,
            messages=self.history,
            model_settings=None,
            model_request_parameters=ModelRequestParameters(),
        )

    async def extend(self, messages: Sequence[Message]) -> None:
        from pydantic_ai import messages as pm
        from pydantic_ai.usage import RequestUsage

        for x in messages:
            index, self._seen = self._seen, self._seen + 1
            if x.role == "assistant":
                usage = self._usage.get(index, {})
                parts: list[Any] = [pm.TextPart(x.text)] if x.text else []
                parts += [pm.ToolCallPart(c.name, c.arguments, c.id) for c in x.tool_calls]
                tokens = RequestUsage(
                    input_tokens=usage.get("prompt_tokens", 0),
                    output_tokens=usage.get("completion_tokens", 0),
                )
                self.history.append(pm.ModelResponse(parts, usage=tokens))
                continue
            part: Any
            if x.role == "system":
                part = pm.SystemPromptPart(x.text)
            elif x.role == "user":
                part = pm.UserPromptPart(x.text)
            else:
                part = pm.ToolReturnPart("bash", x.text, x.tool_call_id or "")
            self.history.append(pm.ModelRequest([part]))

    async def tokens(self) -> int:
        return 0

    def check(self) -> Any:
        return self._capability.before_model_request(self._ctx, self._request)

    async def resize(self, window: int) -> None:
        raise NotImplementedError

    def compact(self) -> Any:
        raise NotImplementedError

    async def describe(self, result: Any) -> str:
        return ""
