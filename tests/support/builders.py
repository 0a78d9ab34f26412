"""Builders shared by the tests: conversations, managers, reference checks."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from contextkeep._capabilities import ModelSpec
from contextkeep._config import ContextConfig
from contextkeep._events import Event, EventBus
from contextkeep._manager import ContextManager
from contextkeep._messages import Message
from contextkeep._offload import Workspace
from contextkeep._tokens import HeuristicEncoder, OpenAIFraming, PromptCounter

EventT = TypeVar("EventT", bound=Event)

REFERENCE = re.compile(r"\[Full detail available at: ([^\]\s]+)\]|refer to the file in '([^']+)'")


def manager(tmp_path: Path, window: int | None = 4000, *, reserve: int = 0, **config: Any) -> ContextManager:
    """A manager on a heuristic counter (fast, deterministic), an in-memory store and a temp workspace."""
    return ContextManager(
        ModelSpec("test-model", window),
        config=ContextConfig(reserved_tokens=reserve, **config),
        workspace=tmp_path / "ws",
        tokenizer="heuristic",
    )


class RecordingEncoder(HeuristicEncoder):
    """The heuristic encoder, remembering every text it was asked to encode."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded: list[str] = []

    def count(self, text: str) -> int:
        self.encoded.append(text)
        return super().count(text)


def recording_manager(tmp_path: Path, window: int = 100_000) -> tuple[ContextManager, list[str]]:
    """A manager whose counters encode through one :class:`RecordingEncoder`; and its record."""
    encoder = RecordingEncoder()
    cm = ContextManager(
        ModelSpec("test-model", window),
        workspace=tmp_path / "ws",
        counter_factory=lambda: PromptCounter(encoder, OpenAIFraming()),
    )
    return cm, encoder.encoded


def call(call_id: str, command: str = "ls") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": f"running {command}",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": command})},
            }
        ],
    }


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def rounds(n: int, size: int = 400, start: int = 0) -> list[dict[str, Any]]:
    """`n` tool rounds whose outputs are `size` characters, each with a recognisable head and tail."""
    out: list[dict[str, Any]] = []
    for i in range(start, start + n):
        body = f"HEAD-{i} " + "x" * max(size - 20, 0) + f" TAIL-{i}"
        out += [call(f"c{i}", f"cmd {i}"), result(f"c{i}", body)]
    return out


def references(view: Sequence[Message]) -> list[str]:
    """Every offload reference shown in a view."""
    return [a or b for m in view for a, b in REFERENCE.findall(m.text)]


async def assert_references_readable(workspace: Workspace, view: Sequence[Message]) -> int:
    """Read back every reference in `view`; return how many there were."""
    refs = references(view)
    for ref in refs:
        assert await workspace.read(ref), ref
    return len(refs)


def collect(bus: EventBus, kind: type[EventT]) -> list[EventT]:
    """Every `kind` event `bus` emits from now on (`Event`: every event), typed as `kind`."""
    seen: list[EventT] = []

    def keep(event: Event) -> None:
        if isinstance(event, kind):
            seen.append(event)

    bus.subscribe(keep, *(() if kind is Event else (kind.type,)))
    return seen
