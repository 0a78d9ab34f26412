"""The fake server fixture, conversation and tools shared by the model adapter tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from contextkeep._messages import Message
from contextkeep.testing import FakeLLMServer, ToolCallSpec

WINDOW = 200
VIEW = [Message("system", "You are terse."), Message("user", "List the files.")]
LS = ToolCallSpec("ls", {"path": "."})
CAT = ToolCallSpec("cat", {"path": "README.md"})
OPENAI_TOOL = {
    "type": "function",
    "function": {
        "name": "ls",
        "description": "List a directory.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
ANTHROPIC_TOOL = {
    "name": "cat",
    "description": "Print a file.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(context_window=WINDOW) as server:
        yield server


def fixed(n: int) -> Any:
    """A counter that says every prompt has `n` tokens."""
    return lambda body: n


def last_body(server: FakeLLMServer) -> dict[str, Any]:
    body: dict[str, Any] = server.requests[-1].body
    return body
