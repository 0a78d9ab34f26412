"""Layer-3 summarisers: the extractive one on hand-made and recorded histories, the LLM one on a fake model."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from contextkeep._capabilities import ModelSpec
from contextkeep._compaction.state import Summary
from contextkeep._config import ContextConfig
from contextkeep._errors import ModelError, SummaryError
from contextkeep._messages import Message, ToolCall
from contextkeep._summarizers import (
    DEFAULT_SUMMARY_FIELDS,
    SUMMARY_MARKER,
    ExtractiveSummarizer,
    LLMSummarizer,
    SummaryRequest,
    render_summary,
)
from contextkeep._tokens import counter_for_model
from contextkeep.models.adapter import ModelReply
from contextkeep.replay.trajectories import load_trajectories
from support import mini_swe_agent_files, require_shared

COUNTER = counter_for_model("deepseek-chat", "heuristic")


def call(call_id: str, command: str) -> ToolCall:
    return ToolCall(call_id, "bash", json.dumps({"command": command}))


HISTORY = [
    Message("system", "You are a coding agent."),
    Message("user", "Fix issue #4521: `parse_header` crashes on empty input in src/http/headers.py."),
    Message(
        "assistant",
        "Let me reproduce it first.",
        tool_calls=(call("c1", "python -m pytest tests/test_headers.py -x"),),
    ),
    Message(
        "tool",
        "<returncode>1</returncode>\nTraceback (most recent call last):\n"
        '  File "src/http/headers.py", line 42, in parse_header\n'
        "IndexError: list index out of range\nFAILED tests/test_headers.py::test_empty",
        tool_call_id="c1",
    ),
    Message(
        "assistant",
        "The crash is at src/http/headers.py:42; I will guard `parts[0]`.",
        tool_calls=(call("c2", "sed -i 's/parts\\[0\\]/(parts or [\"\"])[0]/' src/http/headers.py"),),
    ),
    Message("tool", "<returncode>0</returncode>\n", tool_call_id="c2"),
    Message("user", "Also keep Python 3.8 support, version v2.3.1 must still install."),
    Message("assistant", "Guard added; the test passes now. Next I run the whole suite."),
]


def request(
    messages: Sequence[Message], previous: Summary | None = None, bound: int = 2000
) -> SummaryRequest:
    return SummaryRequest("c", messages, previous, ContextConfig(max_summary_tokens=bound), COUNTER)


def extract(messages: Sequence[Message], previous: Summary | None = None, bound: int = 2000) -> Any:
    return asyncio.run(ExtractiveSummarizer().summarize(request(messages, previous, bound)))


# --- extractive -------------------------------------------------------------------------------------


def test_extractive_exact_output() -> None:
    result = extract(HISTORY)
    assert result.method == "extractive"
    assert result.text == (
        "## Task overview\n"
        "- Fix issue #4521: `parse_header` crashes on empty input in src/http/headers.py.\n"
        "- User: Also keep Python 3.8 support, version v2.3.1 must still install.\n"
        "\n"
        "## Current state\n"
        "Guard added; the test passes now. Next I run the whole suite.\n"
        "\n"
        "## Important discoveries\n"
        "- IndexError: list index out of range\n"
        "- FAILED tests/test_headers.py::test_empty\n"
        "\n"
        "## Context to preserve\n"
        "- id: #4521\n"
        "- id: parse_header\n"
        "- id: parts[0]\n"
        "- id: v2.3.1\n"
        "- $ python -m pytest tests/test_headers.py -x\n"
        "- $ sed -i 's/parts\\[0\\]/(parts or [\"\"])[0]/' src/http/headers.py\n"
        "- file: src/http/headers.py\n"
        "- file: tests/test_headers.py\n"
        "- file: src/http/headers.py:42"
    )
    assert result.text == render_summary(result.data, DEFAULT_SUMMARY_FIELDS)


def test_extractive_pending_request_and_exit_code() -> None:
    messages = [
        Message("user", "Build the docs."),
        Message("assistant", "", tool_calls=(call("c1", "make -C docs html"),)),
        Message("tool", "<returncode>2</returncode>\nmake: *** No rule", tool_call_id="c1"),
        Message("user", "Then deploy to staging."),
    ]
    data = extract(messages).data
    assert data["important_discoveries"] == ["exit code 2 after: make -C docs html"]
    assert data["next_steps"] == ["Then deploy to staging."]
    assert data["current_state"] == ""  # the only assistant message said nothing


def test_extractive_is_deterministic() -> None:
    first = extract(HISTORY, bound=120)
    assert all(extract(HISTORY, bound=120).text == first.text for _ in range(3))
    assert COUNTER.count_text(first.text) <= 120


def test_extractive_merges_into_previous() -> None:
    earlier = extract(HISTORY[:4])
    previous = Summary(earlier.text, 4, earlier.data)
    later = extract(HISTORY[4:], previous)
    context = later.data["context_to_preserve"]
    # Earlier items stay, in their first-seen order, without repeats; the task stays first.
    assert later.data["task_overview"][0].startswith("Fix issue #4521")
    assert "IndexError: list index out of range" in later.data["important_discoveries"]
    assert context.index("$ python -m pytest tests/test_headers.py -x") < context.index(
        "$ sed -i 's/parts\\[0\\]/(parts or [\"\"])[0]/' src/http/headers.py"
    )
    assert len(context) == len(set(context))
    assert later.data["current_state"].startswith("Guard added")
    # Folding in two steps gives what folding in one step gives.
    assert later.data == extract(HISTORY).data


def test_extractive_merges_an_llm_summary() -> None:
    previous = Summary(
        "text", 3, {"task_overview": "Port the CLI to click.", "context_to_preserve": "cli.py"}
    )
    data = extract([Message("assistant", "Done with cli/main.py.")], previous).data
    assert data["task_overview"] == ["Port the CLI to click."]
    assert data["context_to_preserve"] == ["cli.py", "file: cli/main.py"]


def test_extractive_bound_holds_and_keeps_the_important_items() -> None:
    messages = [HISTORY[1]]
    for i in range(300):
        messages += [
            Message(
                "assistant",
                f"Step {i}: check `helper_{i}`.",
                tool_calls=(call(f"c{i}", f"cat pkg/mod_{i}.py"),),
            ),
            Message("tool", f"line {i}\nValueError: bad value {i}\n" + "x" * 400, tool_call_id=f"c{i}"),
        ]
    for bound in (300, 1000, 2000):
        result = extract(messages, bound=bound)
        assert COUNTER.count_text(result.text) <= bound
        assert result.text == render_summary(result.data, DEFAULT_SUMMARY_FIELDS)
        assert "Fix issue #4521" in result.text
        assert "Step 299" in result.text  # the latest state
        # The least important kinds go first: no identifier survives while the newest error is dropped.
        assert "ValueError: bad value 299" in result.text
        assert "id: helper_" not in result.text
    assert COUNTER.count_text(extract(messages, bound=5).text) <= 5  # even a tiny bound holds


# --- acceptance: what the agent needs later survives the summary ------------------------------------

_PATH = re.compile(
    r"(?<![\w./-])(?:\.?/)?((?:[\w-]+/)*[\w-]+\.(?:py|txt|cfg|toml|rst|md|json|ya?ml|ini|html|sql|sh))\b(?![./\w])"
)
_EXCEPTION = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception))(?::\s*(.+))?$", re.M)


def _said(m: Message) -> str:
    return "\n".join([m.text, *(c.arguments for c in m.tool_calls)])


def needed_later(first: Sequence[Message], second: Sequence[Message]) -> set[str]:
    """Paths, exception names and error messages of `first` that the assistant refers to in `second`."""
    earlier = "\n".join(_said(m) for m in first)
    later = "\n".join(_said(m) for m in second if m.role == "assistant")
    paths = set(_PATH.findall(earlier))
    errors = {n for n, _ in _EXCEPTION.findall(earlier)} | {
        msg.strip() for _, msg in _EXCEPTION.findall(earlier) if len(msg.strip()) >= 12
    }
    return {item for item in paths | errors if item in later}


@pytest.mark.parametrize("path", mini_swe_agent_files(), ids=lambda p: p.name.split(".")[0])
def test_extractive_summary_keeps_what_the_second_half_uses(path: Any) -> None:
    trajectory = load_trajectories(path)[0]
    half = len(trajectory.messages) // 2
    first, second = trajectory.messages[:half], trajectory.messages[half:]
    counter = counter_for_model(trajectory.model, "heuristic")
    config = ContextConfig(max_summary_tokens=2000)
    result = asyncio.run(ExtractiveSummarizer().summarize(SummaryRequest("t", first, None, config, counter)))
    needed = needed_later(first, second)
    assert needed, "the trajectory should refer back to something"
    assert sorted(item for item in needed if item not in result.text) == []
    assert counter.count_text(result.text) <= 2000


def test_acceptance_runs_on_the_shared_trajectories() -> None:
    require_shared("trajectories", "mini-swe-agent")
    assert len(mini_swe_agent_files()) >= 10  # the parametrised test above is not silently empty


# --- LLM ----------------------------------------------------------------------------------------------


class FakeAdapter:
    """A model we do not own: answers from a script and records every call."""

    def __init__(self, *answers: str | BaseException | float, window: int | None = None) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[Message], int | None]] = []
        self._spec = ModelSpec("fake", context_window=window)

    @property
    def spec(self) -> ModelSpec:
        return self._spec

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        **options: Any,
    ) -> ModelReply:
        self.calls.append((list(messages), max_tokens))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, float):
            await asyncio.sleep(answer)
            answer = "{}"
        return ModelReply(Message("assistant", answer))


def summary_json(**fields: Any) -> str:
    return json.dumps({name: fields.get(name, "") for name in DEFAULT_SUMMARY_FIELDS})


VALID = summary_json(task_overview="Fix #4521", current_state="guard added", next_steps=["run suite"])


async def llm(adapter: FakeAdapter, messages: Sequence[Message], previous: Summary | None = None, **kw: Any):
    return await LLMSummarizer(adapter, **kw).summarize(request(messages, previous))


async def test_llm_valid_json_is_parsed_and_rendered() -> None:
    adapter = FakeAdapter(VALID)
    result = await llm(adapter, HISTORY[1:4])
    assert result.method == "llm"
    assert result.data == json.loads(VALID)
    assert (
        result.text
        == "## Task overview\nFix #4521\n\n## Current state\nguard added\n\n## Next steps\n- run suite"
    )
    [(sent, max_tokens)] = adapter.calls
    assert max_tokens == 2000
    assert sent[0].role == "system" and SUMMARY_MARKER in sent[0].text
    assert "Answer ONLY with one JSON object" in sent[0].text and '"required"' in sent[0].text
    assert (
        "[assistant calls bash c1]" in sent[1].text and "IndexError: list index out of range" in sent[1].text
    )


async def test_llm_fenced_json_with_prose_is_accepted() -> None:
    adapter = FakeAdapter(f"Here is the summary:\n```json\n{VALID}\n```\nDone.")
    assert (await llm(adapter, HISTORY[1:4])).data == json.loads(VALID)


async def test_llm_malformed_json_is_retried_once_with_the_error() -> None:
    adapter = FakeAdapter('{"task_overview": "unterminated', VALID)
    assert (await llm(adapter, HISTORY[1:4])).data == json.loads(VALID)
    retry = adapter.calls[1][0]
    assert retry[-2].text == '{"task_overview": "unterminated'
    assert "no JSON object" in retry[-1].text


async def test_llm_second_invalid_answer_raises_with_the_validation_error() -> None:
    missing = json.dumps({"task_overview": "x"})
    adapter = FakeAdapter(missing, missing)
    with pytest.raises(SummaryError, match="missing required field 'current_state'"):
        await llm(adapter, HISTORY[1:4])
    assert len(adapter.calls) == 2
    assert "missing required field 'current_state'" in adapter.calls[1][0][-1].text


@pytest.mark.parametrize(
    ("answer", "reason"),
    [("  ", "empty answer"), (ModelError("HTTP 500"), "HTTP 500"), (0.5, "timed out")],
    ids=["empty", "model-error", "timeout"],
)
async def test_llm_failures_raise_summary_error(answer: Any, reason: str) -> None:
    with pytest.raises(SummaryError, match=reason):
        await llm(FakeAdapter(answer), HISTORY[1:4], timeout=0.05)


async def test_llm_second_summary_sends_only_new_messages_and_the_previous_summary() -> None:
    adapter = FakeAdapter(VALID, summary_json(task_overview="Fix #4521", current_state="suite green"))
    first = await llm(adapter, HISTORY[1:4])
    second = await llm(adapter, HISTORY[4:], Summary(first.text, 4, first.data, "llm"))
    sent = adapter.calls[1][0][1].text
    assert json.dumps(first.data) in sent
    assert "Guard added; the test passes now." in sent
    assert "python -m pytest tests/test_headers.py -x" not in sent  # an old message is not sent again
    assert second.data is not None and second.data["current_state"] == "suite green"


async def test_llm_chunks_large_input_and_folds_each_chunk() -> None:
    messages = [Message("user", f"Request {i}: " + "word " * 400) for i in range(6)]
    adapter = FakeAdapter(*(summary_json(task_overview=f"after chunk {n}") for n in range(1, 10)))
    result = await llm(adapter, messages, max_input_tokens=1200)
    assert len(adapter.calls) >= 3
    for n, (sent, _) in enumerate(adapter.calls):
        assert COUNTER.count_text(sent[1].text.split("New messages:\n", 1)[1]) <= 1200
        if n:  # each chunk carries the summary the previous chunk produced
            assert f"after chunk {n}" in sent[1].text
    sent_all = "".join(sent[1].text for sent, _ in adapter.calls)
    assert all(f"Request {i}:" in sent_all for i in range(6))
    assert result.data is not None and result.data["task_overview"] == f"after chunk {len(adapter.calls)}"


async def test_llm_chunk_limit_comes_from_the_model_window() -> None:
    messages = [Message("user", "word " * 2000)]
    adapter = FakeAdapter(VALID, VALID, VALID, VALID, window=6000)
    await llm(adapter, messages)
    assert len(adapter.calls) >= 2
    await llm(FakeAdapter(VALID), messages)  # window unknown: one call, no chunking


async def test_llm_over_long_answer_is_trimmed_to_the_bound() -> None:
    long = summary_json(task_overview="t", context_to_preserve=[f"path/file_{i}.py" for i in range(500)])
    adapter = FakeAdapter(long)
    result = await LLMSummarizer(adapter).summarize(request(HISTORY[1:4], bound=200))
    assert COUNTER.count_text(result.text) <= 200
    assert result.text == render_summary(result.data or {}, DEFAULT_SUMMARY_FIELDS)
    assert "path/file_0.py" in result.text
