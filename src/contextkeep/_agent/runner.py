"""The agent runner: a tool-calling loop in which every model call goes through a session.

`Runner.run(agent, conversation_id, user_input)` runs one turn: each model call is
prepared, made, recorded and (on overflow) recovered by the session; a deferred
compression flagged by one call is applied before the next call of the same turn;
tool calls run (in parallel when the model asks for several), each successful one
writes a snapshot and a task-progress step. Every model call, recovery retries included,
is one of the agent's `max_iterations`. The system prompt of each call is the agent's, then
its skills, then the `on_system_prompt` hooks (the runner's, then the agent's; async ones
awaited before the view is built). A run without a conversation id uses a throwaway store
and workspace, so it persists nothing.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextkeep._agent.recall import recall_tool
from contextkeep._agent.skills import Skill, skills_hook
from contextkeep._agent.tools import Tool, ToolError
from contextkeep._compaction.system_prompt import SystemPromptHook, default_progress_hook
from contextkeep._config import ContextConfig
from contextkeep._errors import MaxIterationsError
from contextkeep._events import EventBus, Listener
from contextkeep._manager import ContextManager
from contextkeep._messages import Message, ToolCall
from contextkeep._offload import ActionSnapshot, Offloader, Workspace
from contextkeep._session import Session
from contextkeep._summarizers.base import Summarizer
from contextkeep.models.adapter import ModelAdapter, adapter_spec
from contextkeep.stores.base import Store
from contextkeep.stores.memory import MemoryStore

__all__ = ["Agent", "Runner", "Turn"]

logger = logging.getLogger("contextkeep.agent")


@dataclass
class Agent:
    """A model with a system prompt and tools."""

    name: str
    """Stable agent id (scopes usage baselines)."""
    model: ModelAdapter
    """The model it calls."""
    system_prompt: str = ""
    """Its instructions."""
    tools: Sequence[Tool | Callable[..., Any]] = ()
    """Tools (functions are wrapped with `Tool.from_function`)."""
    version: str = "1"
    """Agent version (scopes usage baselines)."""
    config: ContextConfig | None = None
    """Context settings (defaults when unset)."""
    default_max_tokens: int | None = None
    """`max_tokens` of each call; also the output reservation when nothing more specific is set."""
    max_iterations: int = 40
    """Model calls allowed in one turn (each recovery retry counts)."""
    recall: bool = True
    """Offer the `recall` tool, so the agent can read back what compaction removed."""
    summarizer: Summarizer | None = None
    """An LLM summariser for layer 3 (the extractive one is used otherwise)."""
    skills: Sequence[Skill] = ()
    """Skills whose name and description follow the system prompt in every call (AgentScope)."""
    hooks: Sequence[SystemPromptHook] = ()
    """`on_system_prompt` hooks, sync or async (after the runner's)."""


@dataclass
class Turn:
    """What one run produced."""

    output: str
    """The final answer's text."""
    messages: list[Message] = field(default_factory=list)
    """Everything the turn added to the transcript."""
    model_calls: int = 0
    """Model calls made (recovery retries included)."""
    tool_calls: int = 0
    """Tools executed."""


class Runner:
    """Runs agents over conversations kept in one store and workspace."""

    def __init__(
        self,
        *,
        store: Store | str | None = None,
        workspace: Workspace | Offloader | str | None = None,
        listeners: Sequence[Listener] = (),
        events: EventBus | None = None,
        hooks: Sequence[SystemPromptHook] = (),
    ) -> None:
        self.store = store
        self.workspace = workspace
        self.hooks = tuple(hooks)
        """`on_system_prompt` hooks of every agent it runs, sync or async (before the agent's)."""
        self.events = events or EventBus()
        for listener in listeners:
            self.events.subscribe(listener)
        self._managers: dict[tuple[str, str], ContextManager] = {}

    def manager(self, agent: Agent) -> ContextManager:
        """The context manager an agent's conversations run through (one per agent and version)."""
        key = (agent.name, agent.version)
        if key not in self._managers:
            self._managers[key] = self._new_manager(agent, self.store, self.workspace)
        return self._managers[key]

    def _new_manager(
        self, agent: Agent, store: Store | str | None, workspace: Workspace | Offloader | str | None
    ) -> ContextManager:
        return ContextManager(
            adapter_spec(agent.model),
            config=agent.config,
            store=store,
            workspace=workspace,
            summarizer=agent.summarizer,
            default_max_tokens=agent.default_max_tokens,
            events=self.events,
            hooks=self._hooks(agent),
        )

    def _hooks(self, agent: Agent) -> tuple[SystemPromptHook, ...]:
        """AgentScope's order: the prompt, the skills, then the hooks (DB-GPT's progress first)."""
        skills = (skills_hook(agent.skills),) if agent.skills else ()
        return (*skills, default_progress_hook, *self.hooks, *agent.hooks)

    async def run(self, agent: Agent, conversation_id: str | None, user_input: str) -> Turn:
        """Run one turn; raises `MaxIterationsError` when its model calls reach `max_iterations`.

        That includes an overflow on the last call allowed: it is not retried (the overflow is
        the error's `__cause__`).
        """
        if conversation_id is None:
            # Agents-Flex: a run without a conversation id persists nothing.
            with tempfile.TemporaryDirectory(prefix="contextkeep-") as scratch:
                manager = self._new_manager(agent, MemoryStore(), scratch)
                return await self._turn(manager, agent, "ephemeral", user_input)
        return await self._turn(self.manager(agent), agent, conversation_id, user_input)

    async def _turn(
        self, manager: ContextManager, agent: Agent, conversation_id: str, user_input: str
    ) -> Turn:
        async with manager.session(
            conversation_id, agent_id=agent.name, agent_version=agent.version
        ) as session:
            tools = {t.name: t for t in _tools(agent, session)}
            schemas = [t.schema() for t in tools.values()] or None
            start = len(session.transcript)
            if start == 0 and (agent.system_prompt or agent.skills or agent.hooks or self.hooks):
                # Even empty: skills and hooks apply to the system message.
                await session.add({"role": "system", "content": agent.system_prompt})
            await session.add({"role": "user", "content": user_input})
            turn = Turn("")
            while True:
                left = agent.max_iterations - session.model_calls  # recovery retries count too
                if left < 1:
                    raise _exhausted(agent, session.model_calls)
                try:
                    reply = await session.complete(
                        agent.model, tools=schemas, max_tokens=agent.default_max_tokens, max_calls=left
                    )
                except MaxIterationsError as exc:  # an overflow on the last call allowed: no retry
                    raise _exhausted(agent, session.model_calls) from exc
                if not reply.message.tool_calls:
                    turn.output = reply.message.text
                    break
                thought = reply.message.text or None  # what the model said while making these calls
                results = await asyncio.gather(
                    *(self._execute(session, tools, c, thought) for c in reply.message.tool_calls)
                )
                await session.add(list(results))
                turn.tool_calls += len(results)
            turn.model_calls = session.model_calls
            turn.messages = list(session.transcript[start:])
            return turn

    async def _execute(
        self, session: Session, tools: dict[str, Tool], call: ToolCall, thought: str | None
    ) -> Message:
        found = tools.get(call.name)
        try:
            if found is None:
                raise ToolError(f"unknown tool {call.name!r}; available: {sorted(tools)}")
            output = await found.call(call.arguments)
        except ToolError as exc:
            return Message("tool", f"Error: {exc}", tool_call_id=call.id)
        except Exception as exc:  # a tool's own bug goes back to the model, not up the stack
            logger.warning("tool %s failed: %s", call.name, exc)
            return Message("tool", f"Error: {type(exc).__name__}: {exc}", tool_call_id=call.id)
        await session.snapshot(
            ActionSnapshot(
                call.name, phase="tool", thought=thought, action_input=call.arguments, observation=output
            ),
            summary=_first_line(output),
        )
        return Message("tool", output, tool_call_id=call.id)


def _exhausted(agent: Agent, calls: int) -> MaxIterationsError:
    return MaxIterationsError(
        f"agent {agent.name!r} made {calls} model calls in one turn "
        f"(max_iterations={agent.max_iterations}) without a final answer"
    )


def _tools(agent: Agent, session: Session) -> list[Tool]:
    tools = [t if isinstance(t, Tool) else Tool.from_function(t) for t in agent.tools]
    if agent.recall:
        tools.append(recall_tool(session.workspace, session.conversation_id))
    return tools


def _first_line(text: str, limit: int = 100) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"
