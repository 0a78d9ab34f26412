"""A proxied tool loop: a fake upstream's agent, 20 KB logs, the proxy served on SQLite, a client loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contextkeep.server.background import BackgroundServer
from contextkeep.testing import FakeLLMServer, Reply, ToolCallSpec
from support.proxy_fixtures import openai_client, served_proxy

__all__ = ["MODEL", "TOOLS", "WINDOW", "agent_step", "log_output", "run_agent", "serve"]

WINDOW = 16_384
MODEL = "gpt-4o-mini"  # the registry says 128,000 tokens
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "read_log",
            "description": "Read one log file.",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    }
]


def agent_step(body: Any) -> Reply:
    step = sum(1 for m in body["messages"] if m["role"] == "tool")
    return Reply(text=f"step {step}", tool_calls=[ToolCallSpec("read_log", {"name": f"worker-{step}.log"})])


def log_output(step: int, size: int = 20_000) -> str:
    """About `size` bytes of a distinct log (every line differs, as real output does)."""
    lines: list[str] = []
    total = 0
    while total < size:
        line = f"worker-{step} line {len(lines)}: batch {step * 1000 + len(lines)} took {len(lines) * 7 % 997} ms"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)


def serve(tmp_path: Path, upstream: FakeLLMServer, **more: Any) -> BackgroundServer:
    return served_proxy(tmp_path, upstream, model=MODEL, **more)


def run_agent(server: BackgroundServer, conversation: str, calls: int, **create: Any) -> None:
    """A tool loop of `calls` model calls; any error the client sees raises (no SDK retries)."""
    client = openai_client(server, conversation)
    history: Any = [
        {"role": "system", "content": "You are an operations agent. Read the logs one by one."},
        {"role": "user", "content": "Find the slowest worker."},
    ]
    for step in range(calls):
        message = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, **create)
        reply = message.choices[0].message.model_dump(exclude_none=True)
        history.append(reply)
        for call in reply["tool_calls"]:
            history.append({"role": "tool", "tool_call_id": call["id"], "content": log_output(step)})
