"""Bad input raises a typed error naming what is wrong, and loses nothing already stored (#19 points 5, 8).

Each of these used to surface as a raw Python error from deep inside (RecursionError,
UnicodeEncodeError, binascii.Error, OSError ENAMETOOLONG, FileNotFoundError, a KeyError at
compaction time), or to be accepted silently (a boolean variable read as false, a reservation
that turned compaction off).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextkeep import ContextManager, ModelSpec, ReserveClamped
from contextkeep._config import ContextConfig, load_config
from contextkeep._errors import (
    ConfigError,
    ContextKeepError,
    InvalidIdError,
    MessageFormatError,
    StoreError,
)
from contextkeep._events import Event
from contextkeep._messages import Message
from support import call, manager, result


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


BAD_MESSAGES: dict[str, tuple[list[Any], type[ContextKeepError], str]] = {
    "nesting 5,000 deep": (
        [{"role": "user", "content": "hi", "provider_field": nested(5_000)}],
        MessageFormatError,
        "deeper than 64 levels",
    ),
    "arguments nesting 5,000 deep": (
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c9",
                        "type": "function",
                        "function": {"name": "bash", "arguments": "[" * 5_000 + "]" * 5_000},
                    }
                ],
            },
            result("c9", "ok"),
        ],
        MessageFormatError,
        "arguments nest deeper",
    ),
    "nesting one level past the limit": (
        [{"role": "user", "content": "hi", "provider_field": nested(64)}],
        MessageFormatError,
        "provider fields nest deeper than 64 levels",
    ),
    "a lone surrogate deep in provider fields": (
        [{"role": "user", "content": "hi", "provider_field": {"a": ["fine", {"b": "broken \udc80"}]}}],
        MessageFormatError,
        r"provider fields is not valid Unicode: a lone surrogate \(U\+DC80\)",
    ),
    "a lone surrogate": (
        [{"role": "user", "content": "broken \ud800 text"}],
        MessageFormatError,
        r"content is not valid Unicode: a lone surrogate \(U\+D800\) at character 7",
    ),
    "a lone surrogate in a part": (
        [{"role": "user", "content": [{"type": "text", "text": "x\udfff"}]}],
        MessageFormatError,
        "content.text is not valid Unicode",
    ),
    "bad base64 in a data URL": (
        [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@notbase64"}}
                ],
            }
        ],
        MessageFormatError,
        r"data URL \(image/png\): invalid base64",
    ),
    "a 10k-character tool-call id": (
        [call("c" * 10_000), result("c" * 10_000, "output " * 100)],
        InvalidIdError,
        "tool_calls.id 'cccc.*' \\(message 1\\) is 10000 characters long, more than 100",
    ),
    "a NUL in a tool-call id": (
        [call("c\x001"), result("c\x001", "x")],
        InvalidIdError,
        "contains a NUL",
    ),
    "a 10k-character message id": (
        [Message("user", "hi", id="m" * 10_000)],
        InvalidIdError,
        "is 10000 characters long",
    ),
}


@pytest.mark.parametrize("case", BAD_MESSAGES, ids=list(BAD_MESSAGES))
async def test_bad_messages_raise_typed_errors_and_leave_the_stored_transcript_alone(
    tmp_path: Path, case: str
) -> None:
    batch, error, reason = BAD_MESSAGES[case]
    store = f"sqlite:///{tmp_path / 'store.db'}"
    cm = ContextManager(
        ModelSpec("test-model", 8_000), store=store, workspace=tmp_path / "ws", tokenizer="heuristic"
    )
    async with cm.session("c") as s:
        await s.add([{"role": "system", "content": "sys"}, {"role": "user", "content": "the task"}])
        await s.add([call("c1"), result("c1", "files")])
        before = s.transcript
        with pytest.raises(error, match=reason):
            await s.add([{"role": "assistant", "content": "thinking"}, *batch])  # a good message first
        assert s.transcript == before
        await s.add({"role": "assistant", "content": "went on"})  # the session continues
        view = await s.prepare()
        assert view.neutral[-1].text == "went on"
    await cm.close()
    reopened = ContextManager(ModelSpec("test-model", 8_000), store=store, workspace=tmp_path / "ws")
    async with reopened.session("c") as s:
        assert [m.text for m in s.transcript] == [m.text for m in before] + ["went on"]
    await reopened.close()
    files = [p.name for p in (tmp_path / "ws").rglob("*") if p.is_file()]
    assert not [name for name in files if "cccc" in name]  # nothing offloaded for the refused batch


async def test_provider_fields_at_the_nesting_limit_or_with_brackets_in_their_text_are_kept(
    tmp_path: Path,
) -> None:
    brackets = {"raw_output": "[{(" * 500, "calls": [{"args": "}]" * 300}]}  # many brackets, shallow
    cm = manager(tmp_path)
    async with cm.session("c") as s:
        stored = await s.add(
            [
                {"role": "user", "content": "hi", "provider_field": nested(63)},
                {"role": "assistant", "content": "ok", "provider_field": brackets, "n": 2**70},
            ]
        )
        assert stored[0].extra["provider_field"] == nested(63)
        assert (stored[1].extra["provider_field"], stored[1].extra["n"]) == (brackets, 2**70)
    await cm.close()


async def test_a_256_character_conversation_id_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    cm = manager(tmp_path)
    with pytest.raises(
        InvalidIdError, match=r"conversation_id 'xxx.*' is 256 characters long, more than 200"
    ):
        async with cm.session("x" * 256):
            pass
    async with cm.session("x" * 200) as s:  # the longest accepted
        await s.add({"role": "user", "content": "hi"})
    await cm.close()


async def test_an_impossible_sqlite_path_is_a_store_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cm = ContextManager(
        ModelSpec("test-model", 8_000), store=f"sqlite:///{blocker}/sub/x.db", workspace=tmp_path / "ws"
    )
    with pytest.raises(StoreError, match=r"cannot create the folder .*a-file/sub"):
        async with cm.session("c"):
            pass
    await cm.close()


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{summary} (covering {span})", r"unknown placeholder \{span\}"),
        ("Summary: {summry}", r"unknown placeholder \{summry\}"),
        ("<summary>{summary}", None),
        ("no slot at all", r"must contain \{summary\}"),
        ("{summary", "expected '}'"),
    ],
)
def test_a_summary_template_is_checked_when_the_config_is_built(template: str, reason: str | None) -> None:
    if reason is None:
        assert ContextConfig(summary_template=template).summary_template == template
        return
    with pytest.raises(ConfigError, match=reason) as raised:
        ContextConfig(summary_template=template)
    assert raised.value.key == "summary_template"


@pytest.mark.parametrize(
    "variable", ["PIN_FIRST_USER", "USAGE_POLICY_ENABLED", "COMPRESS_ON_TOKEN_LIMIT_EXCEEDED"]
)
def test_boolean_variables_accept_only_boolean_words(tmp_path: Path, variable: str) -> None:
    name = f"CONTEXTKEEP_{variable}"
    missing = tmp_path / "none.toml"
    missing.write_text("")
    with pytest.raises(ConfigError, match=rf"{name}: 'maybe' is not a boolean \(accepted.*1, true, yes, on"):
        load_config(missing, environ={name: "maybe"})
    field = variable.lower()
    for word, value in (("TRUE", True), (" off ", False), ("0", False), ("Yes", True)):
        assert getattr(load_config(missing, environ={name: word}), field) is value


# #19 point 5: a reservation that fills the window.


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"model": ModelSpec("m", 4_096, max_output_tokens=4_096)}, "max_output_tokens"),
        ({"model": ModelSpec("m", 4_096, max_output_tokens=8_192)}, "max_output_tokens"),
        ({"model": ModelSpec("m", 4_096), "default_max_tokens": 5_000}, "default_max_tokens"),
        ({"model": ModelSpec("m", 4_096), "config": ContextConfig(reserved_tokens=4_096)}, "reserved_tokens"),
    ],
)
def test_a_configured_reservation_that_fills_the_window_is_refused_at_build(
    tmp_path: Path, kwargs: dict[str, Any], setting: str
) -> None:
    with pytest.raises(ConfigError, match="no room for the prompt") as raised:
        ContextManager(workspace=tmp_path / "ws", tokenizer="heuristic", **kwargs)
    assert raised.value.key == setting


def test_a_config_whose_reservation_fills_its_own_window_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"5000 tokens reserved .* no room for the prompt in a 4096-token"):
        ContextConfig(max_context_tokens=4_096, reserved_tokens=5_000)


def test_unknown_capacity_stays_without_a_ratio(tmp_path: Path) -> None:
    cm = ContextManager(ModelSpec("m", None, max_output_tokens=8_192), workspace=tmp_path / "ws")
    assert cm.new_session("c").budget(max_tokens=100_000).effective is None


def long_history() -> Iterator[dict[str, Any]]:
    yield {"role": "system", "content": "You are an agent."}
    yield {"role": "user", "content": "Do the task."}
    for i in range(40):
        yield call(f"c{i}", f"cat file_{i}.py")
        yield result(f"c{i}", f"line {i} of the output, " * 120)


async def test_a_requests_max_tokens_that_fills_the_window_is_clamped_and_compaction_runs(
    tmp_path: Path,
) -> None:
    cm = manager(tmp_path, window=4_096)
    clamped: list[Event] = []
    cm.events.subscribe(clamped.append, "context.reserve.clamped")
    async with cm.session("c") as s:
        await s.add(list(long_history()))
        assert s.counter.count_prompt(s.transcript) > 20_000
        view = await s.prepare(max_tokens=4_096)
    await cm.close()
    assert view.compacted  # it compacted (0 compactions before: the budget was "unknown")
    assert view.status.ratio is not None and view.status.reserved_output == 1_024
    assert view.tokens <= 4_096 - 1_024
    (event,) = clamped
    assert isinstance(event, ReserveClamped)
    assert (event.requested, event.reserved_output, event.context_window) == (4_096, 1_024, 4_096)


async def test_a_clamped_request_falls_back_to_the_configured_reservation(tmp_path: Path) -> None:
    cm = ContextManager(
        ModelSpec("test-model", 4_096, max_output_tokens=512),
        workspace=tmp_path / "ws",
        tokenizer="heuristic",
    )
    async with cm.session("c") as s:
        await s.add(list(long_history()))
        assert s.budget(max_tokens=8_192).reserved_output == 512
        assert s.budget(max_tokens=1_000).reserved_output == 1_000  # a request that fits is kept
    await cm.close()
