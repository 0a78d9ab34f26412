"""LangChain v1 test harness: a chat model scripted like a provider, the tool it calls, managers.

The model is a `BaseChatModel` subclass (LangChain's own pattern for test models) scripted like a
provider: it calls a tool that returns ~20 KB, counts every prompt it receives with the exact
DeepSeek tokenizer, reports that count as `usage_metadata`, enforces its 32,768-token window with
DeepSeek's real overflow error (an `openai.BadRequestError`), and can raise that error once on
purpose."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import openai
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._formats import from_openai
from contextkeep._manager import ContextManager
from contextkeep._tokens import HFEncoder
from contextkeep.testing._errors import overflow_error
from support import require_shared

WINDOW = 32_768


MAX_TOKENS = 4_096


SYSTEM = "You are a build engineer. Read the build log part by part, then say why the build fails."


TASK = "Build 4411 fails on the release branch. Find out why."


@tool
def read_log(part: int) -> str:
    """Read one part (about 20 KB) of the build log."""
    lines = []
    for i in range(230):
        digest = hashlib.sha1(f"{part}-{i}".encode()).hexdigest()[:16]
        status = "ok" if i % 13 else "retry"
        lines.append(
            f"{part:03d}.{i:04d} 2024-05-0{part % 9 + 1}T12:{i % 60:02d}:07Z worker-{i % 7} "
            f"step={i * 31 % 97} checksum={digest} status={status}"
        )
    return "\n".join(lines)


@dataclass
class Seen:
    """One request as the model received it."""

    messages: list[BaseMessage]
    tokens: int
    """Exact prompt tokens (system prompt, messages and tools), counted like the provider does."""
    refused: bool = False
    """Answered with the overflow error."""


def overflow(prompt: int) -> openai.BadRequestError:
    """DeepSeek's real overflow answer, raised the way the openai SDK raises it."""
    answer = overflow_error(
        "deepseek", window=WINDOW, prompt=prompt, max_tokens=MAX_TOKENS, total=True, request_id="req-1"
    )
    assert answer is not None
    status, body = answer
    request = httpx.Request("POST", "https://api.deepseek.com/chat/completions")
    response = httpx.Response(status, json=body, request=request)
    # The SDK types its httpx objects by its own httpx build; at run time any httpx response serves.
    return openai.BadRequestError(
        f"Error code: {status} - {body}", response=cast(Any, response), body=body["error"]
    )


class ProviderModel(BaseChatModel):
    """A LangChain chat model scripted like a provider (see the module docstring)."""

    counter: Any
    """The exact tokenizer's prompt counter."""
    tool_calls: int = 62
    """Tool calls made before the final answer."""
    fail_once_at: int | None = None
    """After this many replies, the next request is answered with the overflow error (once)."""
    max_tokens: int = MAX_TOKENS
    seen: list[Seen] = Field(default_factory=list)
    replies: int = 0
    failed: bool = False

    @property
    def _llm_type(self) -> str:
        return "provider-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _reply(self, messages: list[BaseMessage], tools: list[dict[str, Any]] | None) -> AIMessage:
        tokens = self.counter.count_prompt(from_openai(convert_to_openai_messages(messages)), tools)
        seen = Seen(list(messages), tokens)
        self.seen.append(seen)
        if tokens + self.max_tokens > WINDOW:
            seen.refused = True
            raise overflow(tokens)
        if self.replies == self.fail_once_at and not self.failed:
            self.failed = seen.refused = True
            raise overflow(WINDOW - 1_000)  # the provider counts more than we do
        self.replies += 1
        n = self.replies
        if n <= self.tool_calls:
            reply = AIMessage(
                f"Reading part {n}.",
                tool_calls=[{"name": "read_log", "args": {"part": n}, "id": f"call_{n:03d}"}],
            )
        else:
            reply = AIMessage("The build fails because worker-3 retries step 42 until the job times out.")
        out = self.counter.count_text(reply.text + json.dumps([c["args"] for c in reply.tool_calls]))
        reply.usage_metadata = {"input_tokens": tokens, "output_tokens": out, "total_tokens": tokens + out}
        return reply

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages, kwargs.get("tools")))])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        reply = self._reply(messages, kwargs.get("tools"))
        for word in reply.text.split(" "):
            yield ChatGenerationChunk(message=AIMessageChunk(content=word + " "))
        for i, c in enumerate(reply.tool_calls):
            chunk: Any = {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[chunk]))
        yield ChatGenerationChunk(
            message=AIMessageChunk(content="", usage_metadata=reply.usage_metadata, chunk_position="last")
        )


@functools.cache
def deepseek() -> HFEncoder:
    """DeepSeek's exact tokenizer, loaded once (a load takes about a second)."""
    return HFEncoder(require_shared("tokenizers", "deepseek_tokenizer.json"))


def open_manager(tmp_path: Path, store: str | None = None, **config: Any) -> ContextManager:
    return ContextManager(
        ModelSpec("deepseek-chat", context_window=WINDOW, max_output_tokens=MAX_TOKENS),
        config=ContextConfig(**config),
        store=store,
        workspace=tmp_path / "ws",
        tokenizer=deepseek(),
        strict_tokenizer=True,
    )


def agent_for(model: ProviderModel, middleware: AgentMiddleware, *, checkpointer: bool = True) -> Any:
    return create_agent(
        model,
        [read_log],
        system_prompt=SYSTEM,
        middleware=[middleware],
        checkpointer=InMemorySaver() if checkpointer else None,
    )


def orphans(messages: Sequence[BaseMessage]) -> int:
    """Tool calls without their result and results without their call."""
    called: set[str] = set()
    answered: set[str] = set()
    strays = 0
    for m in messages:
        if isinstance(m, AIMessage):
            called.update(str(c["id"]) for c in m.tool_calls)
        elif isinstance(m, ToolMessage):
            strays += m.tool_call_id not in called
            answered.add(m.tool_call_id)
    return strays + len(called - answered)


def texts(messages: Sequence[Any]) -> list[str]:
    return [m.text for m in messages]


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}, "recursion_limit": 500}
