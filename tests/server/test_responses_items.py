"""Responses items to a Responses upstream: unchanged messages go as they came, changed ones restated."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from contextkeep._errors import MessageFormatError
from contextkeep._formats.openai import from_openai
from contextkeep._formats.responses_items import history, view_items

REASONING: Any = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "read it"}],
    "encrypted_content": "gAAAA-opaque",
}
CALL: Any = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "read_log",
    "arguments": '{"name": "a.log"}',
    "status": "completed",
}
SEARCH: Any = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "logs"}}
ITEMS: Any = [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
    {"role": "user", "content": "Read a.log."},
    REASONING,
    SEARCH,
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "On it."}],
    },
    CALL,
    {"type": "function_call_output", "call_id": "call_1", "output": "line 1\nline 2\nline 3"},
]


def test_a_view_left_as_it_was_is_the_very_items_and_instructions():
    messages = from_openai(history(ITEMS, "You are terse."))
    assert [m.role for m in messages] == ["system", "system", "user", "assistant", "tool"]
    assert messages[3].reasoning == "read it" and messages[3].tool_calls[0].id == "call_1"
    assert view_items(messages) == ("You are terse.", ITEMS)


def test_what_compaction_changed_is_restated_and_the_rest_kept():
    messages = from_openai(history(ITEMS))
    cut = replace(messages[3], content="line 1 [2 lines cut]")
    shorter = replace(messages[2], content="")  # the text dropped, reasoning and call kept
    instructions, items = view_items([*messages[:2], shorter, cut])
    assert instructions is None
    assert items[:2] == ITEMS[:2]
    assert items[2:5] == [REASONING, SEARCH, CALL]  # the reasoning as it was, so the call keeps its id
    assert items[5] == {"type": "function_call_output", "call_id": "call_1", "output": "line 1 [2 lines cut]"}
    without_reasoning = replace(messages[2], reasoning=None)
    _, items = view_items([without_reasoning])
    said = {"type": "message", "role": "assistant", "content": "On it."}
    call = {k: v for k, v in CALL.items() if k != "id"}  # an item id is refused without its reasoning item
    assert items == [SEARCH, said, call]


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ({"role": "user", "content": [{"text": "a"}]}, "a content part needs a string type"),
        ({"role": "user", "content": [{"type": ["input_text"], "text": "a"}]}, "string type"),
        ({"type": "message", "role": ["user"], "content": "a"}, r"unsupported message role \['user'\]"),
    ],
)
def test_items_of_the_wrong_shape_raise_a_typed_error_naming_it(item: Any, says: str) -> None:
    with pytest.raises(MessageFormatError, match=says):
        history([item])
