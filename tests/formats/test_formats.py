"""Converters: every shared trajectory round-trips; each format's own rules hold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextkeep._errors import MessageFormatError
from contextkeep._formats import from_anthropic, from_openai, from_react, to_anthropic, to_openai, to_react
from contextkeep._messages import ImagePart, Message, TextPart, ToolCall, message_from_dict, message_json
from contextkeep.replay.trajectories import load_trajectories, to_swe_agent
from support import all_trajectory_files, require_shared

FILES: list[Path | None] = [*all_trajectory_files()] or [None]


def _raw_messages(path: Path) -> list[list[dict[str, Any]]]:
    data = json.loads(path.read_text())
    if isinstance(data, dict) and "messages" in data:
        return [[m for m in data["messages"] if m["role"] != "exit"]]
    if isinstance(data, dict) and "history" in data:
        return [data["history"]]
    if isinstance(data, list) and data and "traj" in data[0]:
        return [r["traj"] for r in data]
    return [data]


def _semantic(m: Message) -> tuple[Any, ...]:
    """What every format carries: role, text, calls with parsed arguments, call id."""
    calls = tuple((c.id, c.name, json.loads(c.arguments or "{}")) for c in m.tool_calls)
    text = m.text or None  # Anthropic cannot carry an empty text block beside tool calls
    return (m.role, text, calls, m.tool_call_id)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "none")
def test_every_shared_trajectory_converts_back_losslessly(path: Path | None) -> None:
    path = path or require_shared("trajectories")
    trajectories = load_trajectories(path)
    for trajectory, raw in zip(trajectories, _raw_messages(path), strict=True):
        back = (
            to_swe_agent(trajectory.messages)
            if trajectory.format == "swe-agent"
            else to_openai(trajectory.messages, lossless=True)
        )
        assert back == raw
        assert len(trajectory.messages) == len(raw)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "none")
def test_every_shared_trajectory_survives_anthropic_and_react(path: Path | None) -> None:
    path = path or require_shared("trajectories")
    for trajectory in load_trajectories(path):
        messages = trajectory.messages
        system, converted = to_anthropic(messages)
        again = from_anthropic(converted, system)
        non_system = [m for m in messages if m.role != "system"]
        assert [_semantic(m) for m in again if m.role != "system"] == [_semantic(m) for m in non_system]
        if system is not None:
            assert again[0].text == "\n\n".join(m.text for m in messages if m.role == "system")
        if all(len(m.tool_calls) <= 1 for m in messages):
            text = to_react(messages)
            assert to_react(from_react(text)) == text


def test_view_messages_carry_only_what_the_api_accepts() -> None:
    raw = {
        "role": "assistant",
        "content": None,
        "provider_specific_fields": {},
        "extra": {"x": 1},
        "tool_calls": [
            {"index": 0, "id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        ],
    }
    (m,) = from_openai([raw])
    assert to_openai([m]) == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        }
    ]
    assert to_openai([m], lossless=True) == [raw]


def test_openai_multimodal_parts_round_trip() -> None:
    raw = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
        ],
    }
    (m,) = from_openai([raw])
    assert m.text == "what is this?"
    assert isinstance(m.content, tuple) and isinstance(m.content[1], ImagePart)
    assert m.content[1].media_type == "image/png"
    assert to_openai([m], lossless=True) == [raw]


def test_openai_developer_role_and_reasoning() -> None:
    raw = [
        {"role": "developer", "content": "rules"},
        {"role": "assistant", "content": "done", "reasoning_content": "thinking..."},
    ]
    ms = from_openai(raw)
    assert ms[0].role == "system" and ms[1].reasoning == "thinking..."
    assert to_openai(ms, lossless=True) == raw
    assert to_openai(ms)[0]["role"] == "system"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"role": "robot", "content": "x"}, "unknown role"),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        ({"role": "user", "content": 5}, "content must be"),
        ({"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {}}]}, "function.name"),
        ({"role": "user", "content": [{"text": "no type"}]}, "without a type"),
        ("not a dict", "expected an object"),
    ],
)
def test_bad_openai_input_names_the_problem_and_index(raw: object, problem: str) -> None:
    with pytest.raises(MessageFormatError, match=problem) as info:
        from_openai([{"role": "user", "content": "ok"}, raw])  # type: ignore[list-item]
    assert info.value.index == 1


def test_anthropic_groups_results_and_keeps_system_apart() -> None:
    messages = [
        Message("system", "be brief"),
        Message("user", "list and count"),
        Message(
            "assistant",
            "",
            tool_calls=(ToolCall("a", "ls", '{"path": "."}'), ToolCall("b", "wc", "{}")),
            reasoning="plan",
        ),
        Message("tool", "x y", tool_call_id="b"),
        Message("tool", "f1 f2", tool_call_id="a"),
        Message("assistant", "two files"),
    ]
    system, out = to_anthropic(messages)
    assert system == "be brief"
    assert out == [
        {"role": "user", "content": "list and count"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "plan"},
                {"type": "tool_use", "id": "a", "name": "ls", "input": {"path": "."}},
                {"type": "tool_use", "id": "b", "name": "wc", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "b", "content": "x y"},
                {"type": "tool_result", "tool_use_id": "a", "content": "f1 f2"},
            ],
        },
        {"role": "assistant", "content": "two files"},
    ]
    back = from_anthropic(out, system)
    assert [m.role for m in back] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert back[2].reasoning == "plan"


def test_anthropic_images_and_malformed_arguments() -> None:
    m = Message("user", (TextPart("see"), ImagePart("data:image/png;base64,QUJD", "image/png")))
    _, out = to_anthropic([m])
    assert out[0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"},
    }
    assert from_anthropic(out)[0].content == m.content
    bad = Message("assistant", None, tool_calls=(ToolCall("c", "f", "not json"),))
    _, out = to_anthropic([bad])
    assert out[0]["content"][0]["input"] == {"raw_arguments": "not json"}
    with pytest.raises(MessageFormatError, match="role must be"):
        from_anthropic([{"role": "tool", "content": "x"}])


def test_react_text_parses_into_calls_and_results() -> None:
    text = [
        {"role": "system", "content": "You are a ReAct agent."},
        {"role": "user", "content": "How many rows?"},
        {
            "role": "assistant",
            "content": 'Thought: query it\nAction: sql_query\nAction Input: {"q": "select 1"}',
        },
        {"role": "user", "content": "Observation: 42 rows"},
        {"role": "assistant", "content": "The table has 42 rows."},
    ]
    ms = from_react(text)
    assert ms[2].tool_calls == (ToolCall("react-2", "sql_query", '{"q": "select 1"}'),)
    assert ms[2].content == "query it"
    assert ms[3] == Message("tool", "42 rows", tool_call_id="react-2")
    assert to_react(ms) == text
    with pytest.raises(MessageFormatError, match="one action"):
        to_react([Message("assistant", "", tool_calls=(ToolCall("a", "x", ""), ToolCall("b", "y", "")))])


def test_view_conversion_is_cached_but_each_call_gets_its_own_dicts() -> None:
    m = Message("assistant", "done", tool_calls=(ToolCall("c1", "ls", "{}"),))
    first = to_openai([m])[0]
    first["content"] = "changed by the caller"
    first["extra_field"] = 1
    second = to_openai([m])[0]
    assert second == {
        "role": "assistant",
        "content": "done",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
    }


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "none")
def test_every_shared_message_survives_its_stored_json(path: Path | None) -> None:
    path = path or require_shared("trajectories")
    for trajectory in load_trajectories(path):
        for m in trajectory.messages:
            line = message_json(m)
            assert "\n" not in line  # one line of an offload file
            assert message_from_dict(json.loads(line)) == m


def test_stored_json_keeps_what_orjson_cannot_encode() -> None:
    m = Message(
        "assistant",
        "ünïcode stays text",
        extra={"seed": 2**70, "score": 9.4528e-05, "nested": {"ids": [1, 2]}},
        metadata={"trace": [-(2**65)]},
    )
    line = message_json(m)
    assert "ünïcode" in line
    back = message_from_dict(json.loads(line))
    assert back == m
    assert back.extra["seed"] == 2**70
    assert back.metadata["trace"] == [-(2**65)]
