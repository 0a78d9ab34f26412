"""Counting a prompt that extends the last one costs what was appended: the history is not copied."""

from __future__ import annotations

import pytest

from contextkeep._messages import Message, ToolCall
from contextkeep._tokens import DeepSeekFraming, Framing, HeuristicEncoder, OpenAIFraming, PromptCounter

FRAMINGS = [OpenAIFraming(), DeepSeekFraming()]


def step(i: int) -> list[Message]:
    return [
        Message("assistant", f"call {i}", tool_calls=(ToolCall(f"c{i}", "bash", "{}"),)),
        Message("tool", f"result {i} " * 5, tool_call_id=f"c{i}"),
        *([Message("user", f"and now {i}")] if i % 3 == 0 else []),
    ]


def fresh(framing: Framing, prompt: list[Message], tools: list[dict[str, str]] | None = None) -> int:
    return PromptCounter(HeuristicEncoder(), framing).count_prompt(prompt, tools)


@pytest.mark.parametrize("framing", FRAMINGS, ids=lambda f: f.name)
def test_views_that_grow_are_counted_right_without_copying_the_history(framing: Framing) -> None:
    counter = PromptCounter(HeuristicEncoder(), framing)
    tools = [{"type": "function"}]
    history = [Message("system", "s"), Message("user", "task")]
    counter.count_prompt(list(history), tools)
    remembered = counter._last_messages
    for i in range(40):
        history += step(i)
        view = list(history)  # each call's view is a new list over the same message objects
        assert counter.count_prompt(view, tools) == fresh(framing, view, tools)
        assert counter.last_totals(view) is not None
    assert counter._last_messages is remembered  # kept in step by appending, never copied anew
    assert counter._last_messages == history


@pytest.mark.parametrize("framing", FRAMINGS, ids=lambda f: f.name)
def test_a_longer_prompt_that_differs_inside_is_recounted_and_the_next_append_still_matches(
    framing: Framing,
) -> None:
    counter = PromptCounter(HeuristicEncoder(), framing)
    history = [Message("system", "s"), Message("user", "task"), *step(0), *step(1), *step(2)]
    counter.count_prompt(list(history))
    edited = list(history)
    edited[3] = edited[3].with_text("[masked]")  # same length prefix, last message the same object
    edited += step(3)
    assert counter.count_prompt(edited) == fresh(framing, edited)
    assert counter._last_messages == edited
    grown = [*edited, *step(4)]
    assert counter.count_prompt(grown) == fresh(framing, grown)
    assert counter.count_prompt(tuple(grown)) == fresh(framing, grown)  # not a list: compared as before
