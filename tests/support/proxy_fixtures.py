"""The proxy endpoint tests' shared setup: the proxy in front of a fake upstream, SDK clients, tool loops' parts.

The `start_proxy` fixture (tests/server/conftest.py) starts both and stops them when the test ends;
`served_proxy` is for a test that stops them itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anthropic
import openai

from contextkeep.server import ServerSettings, create_app
from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer, Reply, Responder, ToolCallSpec
from support.clients import closing

__all__ = [
    "ANTHROPIC_READ_LOG",
    "RESPONSES_READ_LOG",
    "StartProxy",
    "answer_tool_use",
    "anthropic_client",
    "bodies_sent",
    "breakpoints",
    "chat_calls",
    "continue_by_previous_id",
    "counting_agent",
    "messages_create",
    "openai_client",
    "proxy_settings",
    "responses_create",
    "served_proxy",
    "worker_log",
]

_DESCRIBED: Any = {"name": "read_log", "description": "Read one log file."}
_NAME_SCHEMA: Any = {"type": "object", "properties": {"name": {"type": "string"}}}
ANTHROPIC_READ_LOG: Any = {**_DESCRIBED, "input_schema": _NAME_SCHEMA}
RESPONSES_READ_LOG: Any = {"type": "function", **_DESCRIBED, "parameters": _NAME_SCHEMA}

StartProxy = Callable[..., BackgroundServer]
"""The `start_proxy` fixture: `start_proxy(upstream, **proxy_settings_fields)`."""


def proxy_settings(tmp_path: Path, upstream: FakeLLMServer | str, **fields: Any) -> ServerSettings:
    """The proxy on a SQLite store in `tmp_path` in front of `upstream`; `fields` add to or replace these."""
    defaults: dict[str, Any] = {
        "store": f"sqlite:///{tmp_path / 'ck.db'}",
        "workspace": str(tmp_path / "ws"),
        "upstream": upstream if isinstance(upstream, str) else upstream.base_url,
        "model": "fake-model",
        "tokenizer": "tiktoken:o200k_base",  # the fake upstream counts with it
    }
    return ServerSettings(**{**defaults, **fields})


def served_proxy(tmp_path: Path, upstream: FakeLLMServer | str, **fields: Any) -> BackgroundServer:
    """The proxy of `proxy_settings`, not yet started (enter it, or `.start()` it)."""
    return BackgroundServer(create_app(proxy_settings(tmp_path, upstream, **fields)))


# The SDKs' own retries are off: every error a test provokes reaches the test.
def openai_client(
    server: BackgroundServer, conversation: str | None = None, *, api_key: str = "test", **options: Any
) -> openai.OpenAI:
    """An `openai` client of the proxy, naming `conversation` in `X-Conversation-Id` if given."""
    headers = {"X-Conversation-Id": conversation} if conversation else {}
    return closing(
        openai.OpenAI(
            base_url=f"{server.url}/v1",
            api_key=api_key,
            default_headers=headers,
            **{"max_retries": 0, **options},
        )
    )


def anthropic_client(
    server: BackgroundServer, conversation: str | None = None, *, api_key: str = "test"
) -> anthropic.Anthropic:
    """An `anthropic` client of the proxy, naming `conversation` in `X-Conversation-Id` if given."""
    headers = {"X-Conversation-Id": conversation} if conversation else {}
    return closing(
        anthropic.Anthropic(base_url=server.url, api_key=api_key, default_headers=headers, max_retries=0)
    )


def counting_agent(
    tool: str = "read_log", log: str = "worker-{}.log", reasoning: Callable[[int], str] | None = None
) -> Responder:
    """An upstream agent whose call n (from 0) answers `step n` and calls `tool` for the log named `log`.format(n)."""
    steps = itertools.count()

    def reply(body: Mapping[str, Any]) -> Reply:
        step = next(steps)
        return Reply(
            text=f"step {step}",
            reasoning=reasoning(step) if reasoning else None,
            tool_calls=[ToolCallSpec(tool, {"name": log.format(step)})],
        )

    return reply


def worker_log(step: int) -> str:
    """40 distinct lines of worker `step`'s log (about 2 KB)."""
    return "\n".join(
        f"worker-{step} line {i}: batch {step * 100 + i} took {i * 7 % 97} ms" for i in range(40)
    )


def responses_create(client: openai.OpenAI, stream: bool, **request: Any) -> Any:
    """`client.responses.create(**request)`, or the response a stream of it completes with."""
    if not stream:
        return client.responses.create(**request)
    events = list(client.responses.create(**request, stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    return events[-1].response


def continue_by_previous_id(client: openai.OpenAI, stream: bool, tools: Any) -> tuple[Any, str, Any]:
    """A response with a function call, then its output sent by `previous_response_id`: both, and the call's id."""
    first = responses_create(client, stream, model="fake-model", input="Read the first log.", tools=tools)
    [call] = [item for item in first.output if item.type == "function_call"]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "done"}
    second = responses_create(
        client, stream, model="fake-model", input=[output], previous_response_id=first.id, tools=tools
    )
    return first, call.call_id, second


def messages_create(client: anthropic.Anthropic, stream: bool, **request: Any) -> anthropic.types.Message:
    """`client.messages.create(**request)`, or the message a stream of it ends with."""
    if not stream:
        message: anthropic.types.Message = client.messages.create(**request)
        return message
    with client.messages.stream(**request) as events:
        return events.get_final_message()


def answer_tool_use(history: list[Any], message: anthropic.types.Message, step: int) -> Any:
    """`message`, then the result of its one tool use (worker `step`'s log), added to `history`; that tool use."""
    [use] = [b for b in message.content if b.type == "tool_use"]
    history.append({"role": "assistant", "content": [b.model_dump() for b in message.content]})
    result = {"type": "tool_result", "tool_use_id": use.id, "content": worker_log(step)}
    history.append({"role": "user", "content": [result]})
    return use


def bodies_sent(upstream: FakeLLMServer, path: str) -> list[dict[str, Any]]:
    """The bodies of the model calls `upstream` got at `path`; not the proxy's empty probe (`server._probe`)."""
    return [r.body for r in upstream.requests if r.path == path and r.body]


def chat_calls(upstream: FakeLLMServer) -> int:
    """How many chat completions `upstream` was asked for."""
    return sum(1 for r in upstream.requests if r.path == "/v1/chat/completions")


def breakpoints(value: Any) -> int:
    """How many `cache_control` marks `value` (a request body or any part of one) carries."""
    if isinstance(value, dict):
        return int("cache_control" in value) + sum(breakpoints(v) for v in value.values())
    if isinstance(value, list):
        return sum(breakpoints(v) for v in value)
    return 0
